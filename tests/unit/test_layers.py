"""Imports point down, never round; no module over 600 lines.

The rule, checked on every ``import`` and ``from … import`` under ``stream/`` (parsed, not
run: function-local imports and those under ``TYPE_CHECKING`` count like the others;
relative ones are resolved; an import names the most specific module it reaches, so
``from stream.output import headers`` is an import of ``stream.output.headers``):

- Each top-level package or module of ``stream/`` is a unit (``session``, ``config``,
  ``redis_client``; ``stream`` itself is the root ``__init__``), placed in one tier of
  ``LAYERS``, lowest first. A module may import from its own unit or from a unit of a
  lower tier; units of one tier are peers and import nothing from each other. So the
  units form no cycle either.
- Modules form no cycle at all, within a unit too: a cycle broken only by importing
  inside a function is still a cycle.
- A new unit must be placed in ``LAYERS`` before it can be imported (or import).
- No file under ``stream/`` is over ``MAX_LINES`` lines: a module that grows past it is
  split along a seam of its own.

The order is the README's architecture (its layout section; the packages' ``__init__``
docstrings): the pure core at the bottom, then what is published (``output``), the
settings, the Redis client factory, the writers, the operator tools, the two services'
edges (the gateway; the worker's ``app``), the command line on top.
"""

import ast
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pytest

STREAM = Path(__file__).resolve().parents[2] / "stream"
MAX_LINES = 600
SKIPPED = ("_native",)  # the compiled core's build output, not source

LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(tier.split())
    for tier in (
        # Imports nothing of the service: the event contract, the settings table's rows,
        # process-wide runtime settings, the compiled core's loader.
        "contract environment runtime native",
        # The root (``__version__``, the compiled core activated), and what stands on one
        # of the above only: pricing, reading dsh logs, Kafka's security settings, the
        # tests' event factory.
        "stream pricing logs kafka_security testing",
        "projections",
        "session",  # owns the input contract it reads (``RESET_HEADER`` included)
        "output",  # what is published, built from the session's results
        "config",
        "redis_client",  # every Redis client, made from the settings
        "publish",
        "ops",  # confluent-kafka tools; the re-publish writes through ``publish``
        "gateway app",  # the two services' edges: neither imports the other
        "cli",
        "__main__",
    )
)


def unit_of(module: str) -> str:
    """``stream.gateway.app`` -> ``gateway``; ``stream`` -> ``stream``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def tier_of(layers: Iterable[frozenset[str]]) -> dict[str, int]:
    return {unit: n for n, tier in enumerate(layers) for unit in tier}


def modules(root: Path = STREAM) -> dict[str, Path]:
    """Every module under ``root`` by dotted name (a package by its ``__init__``)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root.parent).with_suffix("")
        if relative.parts[1:2] and relative.parts[1] in SKIPPED:
            continue
        parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
        found[".".join(parts)] = path
    return found


def imports(module: str, path: Path, known: Mapping[str, Path]) -> Iterator[tuple[str, int]]:
    """The service's modules ``module`` imports, with the line, wherever the import is."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        else:
            continue
        for name in names:
            while name and name not in known:  # `import stream.x.y.z` where z is a name
                name = name.rpartition(".")[0]
            if name and name != module:
                yield name, node.lineno


def graph(known: Mapping[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {imported module: line of its first import}."""
    edges: dict[str, dict[str, int]] = {}
    for module, path in known.items():
        edges[module] = {}
        for target, line in imports(module, path, known):
            edges[module].setdefault(target, line)
    return edges


def upward(edges: Mapping[str, Mapping[str, int]], layers: Iterable[frozenset[str]]) -> list[str]:
    """Every import of a unit not below the importer's (or of a unit not placed)."""
    tiers = tier_of(layers)
    found = []
    for module, targets in sorted(edges.items()):
        unit = unit_of(module)
        if unit not in tiers:
            found.append(f"{module}: unit {unit!r} has no place in LAYERS")
            continue
        for target, line in sorted(targets.items()):
            other = unit_of(target)
            if other == unit:
                continue
            if other not in tiers:
                found.append(f"{module}:{line} imports {target}: {other!r} is not in LAYERS")
            elif tiers[other] >= tiers[unit]:
                where = "a peer" if tiers[other] == tiers[unit] else "above"
                found.append(f"{module}:{line} imports {target} ({other} is {where} {unit})")
    return found


def cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def too_long(known: Mapping[str, Path], limit: int = MAX_LINES) -> list[str]:
    lengths = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in known.items()}
    return [f"{m}: {n} lines" for m, n in sorted(lengths.items()) if n > limit]


KNOWN = modules()
EDGES = graph(KNOWN)


def test_imports_point_down_the_layers() -> None:
    assert upward(EDGES, LAYERS) == []


def test_no_modules_import_each_other_round() -> None:
    assert cycles(EDGES) == []


def test_no_module_is_over_600_lines() -> None:
    assert too_long(KNOWN) == []


def test_every_unit_is_placed_once() -> None:
    placed = [unit for tier in LAYERS for unit in tier]
    assert len(placed) == len(set(placed))
    assert {unit_of(module) for module in KNOWN} == set(placed)


def test_the_parser_sees_every_kind_of_import(tmp_path: Path) -> None:
    root = tmp_path / "stream"
    (root / "pkg").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "low.py").write_text("X = 1\n")
    (root / "pkg" / "__init__.py").write_text("from . import mod\n")
    (root / "pkg" / "mod.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import stream.low\n"
        "def f():\n    from ..low import X\n    from stream.pkg import other\n"
    )
    (root / "pkg" / "other.py").write_text("import stream.pkg.mod as m\n")
    known = modules(root)
    assert set(known) == {
        "stream",
        "stream.low",
        "stream.pkg",
        "stream.pkg.mod",
        "stream.pkg.other",
    }
    edges = graph(known)
    assert edges["stream.pkg"] == {"stream.pkg.mod": 1}
    assert edges["stream.pkg.mod"] == {"stream.low": 3, "stream.pkg.other": 6}
    assert cycles(edges) == [["stream.pkg.mod", "stream.pkg.other"]]


@pytest.mark.parametrize(
    ("edges", "said"),
    [
        ({"stream.session.input": {"stream.output.headers": 14}}, "(output is above session)"),
        ({"stream.gateway.server": {"stream.app.run": 3}}, "(app is a peer gateway)"),
        ({"stream.extra": {}}, "unit 'extra' has no place in LAYERS"),
        ({"stream.cli.x": {"stream.extra.y": 2}}, "'extra' is not in LAYERS"),
    ],
)
def test_the_layer_check_names_what_points_up(edges: dict[str, dict[str, int]], said: str) -> None:
    (found,) = upward(edges, LAYERS)
    assert said in found


def test_what_each_check_lets_through() -> None:
    assert upward({"stream.cli.x": {"stream.cli.y": 1, "stream.contract.events": 2}}, LAYERS) == []
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}}) == [["a", "b", "c"]]
