"""What a run shows while it runs: a bar of phases and, during execution, of MB landed in the
(local) object store; and how long each phase took, for the report."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from benchmarks.harness.spec import MB

WAL_PREFIX: Final = "wal/"
PHASES: Final = (
    "spark",
    "topics",
    "workload",
    "execute",
    "verify",
    "analyse",
    "verify consumed",
    "consolidate",
    "verify consolidated",
    "baselines",
    "report",
)


class Progress:
    """A phase bar, and during execution a bar of MB landed in the (local) object store."""

    def __init__(self, enabled: bool, phases: int = len(PHASES)) -> None:
        self.enabled = enabled
        self.bar: Any = None
        if enabled:
            from tqdm import tqdm  # type: ignore[import-untyped]

            self.bar = tqdm(total=phases, desc="bench", unit="phase", leave=False)
        self.times: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if self.bar is not None:
            self.bar.set_description(f"bench: {name}")
        started = time.perf_counter()
        yield
        self.times[name] = self.times.get(name, 0.0) + time.perf_counter() - started
        if self.bar is not None:
            self.bar.update(1)

    @contextlib.contextmanager
    def watch_store(self, root: Path | None, total_mb: float) -> Iterator[None]:
        if not self.enabled or root is None:
            yield
            return
        from tqdm import tqdm

        stop = threading.Event()
        bar = tqdm(total=round(total_mb), desc="produced", unit="MB", leave=False)

        def poll() -> None:
            while not stop.wait(0.5):
                bar.n = min(round(_tree_bytes(root / WAL_PREFIX) / MB), bar.total)
                bar.refresh()

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            bar.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def write(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text)
        else:
            print(text)


def _tree_bytes(root: Path) -> int:
    total = 0
    for directory, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(directory, name)).st_size
    return total
