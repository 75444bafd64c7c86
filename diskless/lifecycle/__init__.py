"""Object lifecycle: orphan reconciliation, safe deletion, retention scheduling and
consolidation."""

from diskless.coordinator import FileState
from diskless.lifecycle._config import (
    ConsolidatorConfig,
    FileManagerConfig,
    RetentionSchedulerConfig,
    required_orphan_grace_ms,
)
from diskless.lifecycle._consolidator import Consolidator
from diskless.lifecycle._file_manager import FileManager
from diskless.lifecycle._retention import RetentionScheduler
from diskless.lifecycle._stats import (
    ConsolidationRun,
    ConsolidatorStats,
    CycleReport,
    FileManagerStats,
    RetentionRun,
    RetentionStats,
)

__all__ = [
    # the file manager
    "CycleReport",
    "FileManager",
    "FileManagerConfig",
    "FileManagerStats",
    "FileState",
    "required_orphan_grace_ms",
    # retention
    "RetentionRun",
    "RetentionScheduler",
    "RetentionSchedulerConfig",
    "RetentionStats",
    # consolidation
    "ConsolidationRun",
    "Consolidator",
    "ConsolidatorConfig",
    "ConsolidatorStats",
]
