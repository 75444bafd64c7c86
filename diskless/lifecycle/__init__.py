"""Object lifecycle: orphan reconciliation, safe deletion, retention scheduling, consolidation
and the cleaning of compacted topics."""

from diskless.coordinator import FileState
from diskless.lifecycle._cleaner import Cleaner, CleanerSettings, cleaner_settings
from diskless.lifecycle._config import (
    CleanerConfig,
    ConsolidatorConfig,
    FileManagerConfig,
    RetentionSchedulerConfig,
    required_orphan_grace_ms,
)
from diskless.lifecycle._consolidator import Consolidator
from diskless.lifecycle._file_manager import FileManager
from diskless.lifecycle._retention import RetentionScheduler
from diskless.lifecycle._stats import (
    CleanerStats,
    CleaningRun,
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
    # compaction
    "Cleaner",
    "CleanerConfig",
    "CleanerSettings",
    "CleanerStats",
    "CleaningRun",
    "cleaner_settings",
]
