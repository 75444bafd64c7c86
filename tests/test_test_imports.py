"""Unit: the tests lean on the test kit, not on each other nor on the benchmarks.

What several test packages or the benchmarks share lives in `testkit`; what one test package
shares among its modules lives in that package's `_`-prefixed modules. So a test module imports
from `tests` only its own package, never a `test_*` module nor a `conftest` (fixtures come from
the `testkit.fixtures` plugin or the package's conftest, by name); no test imports `benchmarks`,
except the harness's own tests, which import the harness they test; and neither `testkit` nor
`benchmarks` imports `tests`. Every import is read from the source, function-level ones included.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
HARNESS_TESTS: Final = "tests.harness"
HARNESS: Final = "benchmarks.harness"


def module_of(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def imports_of(path: Path) -> Iterator[str]:
    """Every module `path` imports, absolute; `from x import y` counts as `x.y` and `x`."""
    name = module_of(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def sources(*packages: str) -> list[Path]:
    return sorted(path for package in packages for path in (ROOT / package).rglob("*.py"))


def _is_test_module(module: str) -> bool:
    last = module.rpartition(".")[2]
    return last.startswith("test_") or last == "conftest"


def test_no_module_imports_a_test_module_or_a_conftest() -> None:
    found = [
        f"{module_of(path)} -> {target}"
        for path in sources("tests", "testkit", "benchmarks")
        for target in imports_of(path)
        if target.partition(".")[0] == "tests" and _is_test_module(target)
    ]
    assert not found


def test_a_test_package_imports_only_its_own_modules_from_tests() -> None:
    found = []
    for path in sources("tests"):
        name = module_of(path)
        own = ".".join(name.split(".")[:2]) if path.parent != ROOT / "tests" else "tests"
        for target in imports_of(path):
            if target.partition(".")[0] != "tests" or target == "tests":
                continue
            parts = target.split(".")
            if own == "tests":  # the top level's own modules, not a test package's
                inside = not (ROOT / "tests" / parts[1]).is_dir()
            else:
                inside = ".".join(parts[:2]) == own
            if not inside:
                found.append(f"{name} -> {target}")
    assert not found


def test_no_test_imports_the_benchmarks_but_the_harness_tests_their_harness() -> None:
    found = [
        f"{module_of(path)} -> {target}"
        for path in sources("tests")
        for target in imports_of(path)
        if target.partition(".")[0] == "benchmarks"
        and not (
            module_of(path).startswith(f"{HARNESS_TESTS}.")
            and (target == "benchmarks" or target.startswith(HARNESS))
        )
    ]
    assert not found


def test_the_kit_and_the_benchmarks_never_import_the_tests() -> None:
    found = [
        f"{module_of(path)} -> {target}"
        for path in sources("testkit", "benchmarks")
        for target in imports_of(path)
        if target.partition(".")[0] == "tests"
    ]
    assert not found
