"""Object lifecycle: orphan reconciliation, safe deletion and retention scheduling."""

from diskless.coordinator import FileState
from diskless.lifecycle._config import (
    FileManagerConfig,
    RetentionSchedulerConfig,
    required_orphan_grace_ms,
)
from diskless.lifecycle._file_manager import FileManager
from diskless.lifecycle._retention import RetentionScheduler
from diskless.lifecycle._stats import CycleReport, FileManagerStats, RetentionRun, RetentionStats

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
]
