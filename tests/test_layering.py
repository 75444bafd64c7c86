"""Unit: the import graph of the library, the test kit and the benchmarks has layers and no circles.

Every import is read from the source (function-level imports included), so a circle cannot hide
behind a lazy import. Packages of the library import each other only through their public
`__init__`; the library's own top-level private modules (`diskless._types`…) are its base layer.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
LAYERS: Final = (
    ("diskless._types", "diskless.errors", "diskless.clock"),
    (
        "diskless.records",
        "diskless.routing",
        "diskless._kafka_errors",
        "diskless._limits",
        "diskless._object_keys",
        "diskless._availability",
        "diskless._fault_dice",
        "diskless._scram",
        "diskless.metrics",
    ),
    ("diskless.storage", "diskless.txn", "diskless.compaction"),
    ("diskless.coordinator",),
    ("diskless.wal",),
    ("diskless._results", "diskless.read"),
    ("diskless.broker", "diskless.lifecycle"),
    ("diskless",),
    ("diskless.kafka_server",),
    ("diskless.mirror",),
    ("testkit",),
    ("benchmarks",),
)
"""Lowest first: a unit may import from its own unit and from lower layers only."""
LAYER_OF: Final = {unit: depth for depth, units in enumerate(LAYERS) for unit in units}


def modules() -> dict[str, Path]:
    found = {}
    sources = [*ROOT.glob("diskless/**/*.py"), *ROOT.glob("benchmarks/**/*.py")]
    sources += ROOT.glob("testkit/**/*.py")
    # A C extension is known by its stub.
    for path in [*sources, *ROOT.glob("diskless/**/*.pyi")]:
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The modules of this repository that `name` imports, anywhere in its body."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


def unit_of(module: str) -> str:
    """The layered unit a module belongs to: a subpackage, or a top-level module."""
    parts = module.split(".")
    if parts[0] in ("testkit", "benchmarks"):
        return parts[0]
    return ".".join(parts[:2]) if len(parts) > 1 else "diskless"


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imports_of(name, path, known)) for name, path in known.items()}


def test_every_unit_has_a_layer() -> None:
    assert {unit_of(name) for name in modules()} <= set(LAYER_OF)


def test_no_import_goes_up_a_layer() -> None:
    upward = [
        f"{name} -> {target}"
        for name, targets in graph().items()
        for target in targets
        if LAYER_OF[unit_of(target)] > LAYER_OF[unit_of(name)]
    ]
    assert not upward


def test_no_import_circles() -> None:
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in edges:
        if node not in index:
            visit(node)
    assert not circles


def test_library_packages_meet_only_through_their_public_names() -> None:
    private = [
        f"{name} -> {target}"
        for name, targets in graph().items()
        if name.startswith("diskless")
        for target in targets
        if unit_of(target) != unit_of(name)
        and unit_of(target) != "diskless"
        and any(part.startswith("_") for part in target.split(".")[2:])
    ]
    assert not private


KAFKA_SERVER: Final = "diskless.kafka_server"
KAFKA_SERVER_PARTS: Final = ("_protocol", "_coordination", "_handlers", "_server")
"""The parts of `diskless.kafka_server`, lowest first; the package's own modules (`__init__`,
`__main__`) sit above them all."""


def kafka_server_part(module: str) -> int:
    first = module.removeprefix(KAFKA_SERVER).lstrip(".").split(".")[0]
    return (
        KAFKA_SERVER_PARTS.index(first) if first in KAFKA_SERVER_PARTS else len(KAFKA_SERVER_PARTS)
    )


def test_kafka_server_parts_import_down_and_only_each_others_public_modules() -> None:
    """Protocol, coordination, handlers, server: the handlers see the broker serving them only as
    `_handlers.context.BrokerContext`, and the server reaches the APIs only through the handler
    table (`_handlers.table`), never a handler's module (they are private to their part)."""
    inside = {
        name: {t for t in targets if t.startswith(KAFKA_SERVER)}
        for name, targets in graph().items()
        if name.startswith(KAFKA_SERVER)
    }
    assert {kafka_server_part(name) for name in inside} == set(range(len(KAFKA_SERVER_PARTS) + 1))
    upward = [
        f"{name} -> {target}"
        for name, targets in inside.items()
        for target in targets
        if kafka_server_part(target) > kafka_server_part(name)
    ]
    assert not upward
    private = [
        f"{name} -> {target}"
        for name, targets in inside.items()
        for target in targets
        if kafka_server_part(target) != kafka_server_part(name)
        and any(part.startswith("_") for part in target.split(".")[3:])
    ]
    assert not private


SERVER: Final = f"{KAFKA_SERVER}._server"
SERVER_PACKAGES: Final = ("auth", "settings", "network", "metrics", "process")
"""The server's packages by job, lowest first."""


def test_server_packages_import_down() -> None:
    """Who a client is, the settings, the network, the metrics, the process: each job imports
    only those before it, and every module of the server belongs to one of them."""
    inside = {
        name: {t for t in targets if t.startswith(f"{SERVER}.")}
        for name, targets in graph().items()
        if name.startswith(f"{SERVER}.")
    }
    package = {name: name.removeprefix(f"{SERVER}.").split(".")[0] for name in inside}
    assert set(package.values()) == set(SERVER_PACKAGES)
    upward = [
        f"{name} -> {target}"
        for name, targets in inside.items()
        for target in targets
        if SERVER_PACKAGES.index(package[target]) > SERVER_PACKAGES.index(package[name])
    ]
    assert not upward
