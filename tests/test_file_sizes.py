"""Unit: no source file of the library, the benchmarks or the test kit is longer than 600 lines.

A file past that has grown a second job; it is split by job, not trimmed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
CHECKED: Final = ("diskless", "benchmarks", "testkit")
SUFFIXES: Final = frozenset({".py", ".pyi", ".c", ".sql"})
LINES_MAX: Final = 600


def _lines(path: Path) -> int:
    with path.open("rb") as source:
        return sum(1 for _ in source)


def sources() -> list[Path]:
    return sorted(
        path
        for package in CHECKED
        for path in (ROOT / package).rglob("*")
        if path.suffix in SUFFIXES and path.is_file() and "__pycache__" not in path.parts
    )


def test_the_checked_packages_have_sources() -> None:
    found = {path.relative_to(ROOT).parts[0] for path in sources()}
    assert found == set(CHECKED)


def test_no_file_is_over_the_limit() -> None:
    over = {
        path.relative_to(ROOT).as_posix(): _lines(path)
        for path in sources()
        if _lines(path) > LINES_MAX
    }
    assert not over
