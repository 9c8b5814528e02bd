"""The fold core is pure: no I/O, clocks, networking or service frameworks; and only
``stream/app/`` touches the stream framework (Faust and its ``mode``).

The sources are parsed, never imported, so a forbidden import anywhere in a module
(top level, inside a function, under ``TYPE_CHECKING``, via ``importlib``) is caught
without running it.
"""

import ast
from pathlib import Path

import pytest

import stream

PURE_PACKAGES = ("contract", "pricing", "projections", "session", "output")
# Not the core, but held to the same rule: the event factory of the tests and benchmarks.
ALSO_PURE = ("testing",)
FORBIDDEN = frozenset(
    {
        "faust",
        "mode",
        "rocksdict",
        "redis",
        "confluent_kafka",
        "aiokafka",
        "time",
        "datetime",
        "socket",
        "asyncio",
    }
)
ROOT = Path(stream.__file__).parent
MODULES = sorted(p for package in PURE_PACKAGES + ALSO_PURE for p in (ROOT / package).rglob("*.py"))

# The stream framework stays behind stream/app/ so the rest can be tested, and Faust
# replaced, without it; "mode" is Faust's service library (mode-streaming), aiokafka its
# Kafka client (the operator tools use confluent-kafka).
FRAMEWORK = frozenset({"faust", "mode", "aiokafka"})
# Modules outside stream/app/ allowed to import it: none (`stream worker` starts Faust
# through stream.app.run). Nothing may be added to this set.
FRAMEWORK_ALLOWED: frozenset[str] = frozenset()


def imported_names(tree: ast.AST) -> list[tuple[int, str]]:
    """Every absolute module name a module imports, with its line."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call):
            # importlib.import_module("x") / __import__("x") with a literal name
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in ("import_module", "__import__") and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    found.append((node.lineno, first.value))
    return found


def framework_imports(root: Path) -> list[str]:
    """Every import of the stream framework outside stream/app/, as "path:line: imports name"."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        if path.is_relative_to(root / "app"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found.extend(
            f"{path.relative_to(root.parent).as_posix()}:{line}: imports {name}"
            for line, name in imported_names(tree)
            if name.split(".")[0] in FRAMEWORK
        )
    return found


def test_the_pure_packages_exist() -> None:
    for package in PURE_PACKAGES + ALSO_PURE:
        assert (ROOT / package / "__init__.py").is_file()
    assert len(MODULES) >= 10


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT.parent)))
def test_no_impure_imports(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    offending = [
        f"{path.relative_to(ROOT.parent)}:{line}: imports {name}"
        for line, name in imported_names(tree)
        if name.split(".")[0] in FORBIDDEN
    ]
    assert not offending, "\n".join(offending)


@pytest.mark.parametrize(
    ("source", "caught"),
    [
        ("import time", True),
        ("import datetime as dt", True),
        ("from asyncio import sleep", True),
        ("import confluent_kafka.admin", True),
        ("def f():\n    import socket", True),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import redis", True),
        ("import importlib\nimportlib.import_module('faust')", True),
        ("__import__('rocksdict')", True),
        ("from . import time", False),  # a relative module of that name is ours
        ("import timeit", False),
        ("import orjson", False),
    ],
)
def test_the_guard_itself(source: str, caught: bool) -> None:
    names = [name for _, name in imported_names(ast.parse(source))]
    assert any(name.split(".")[0] in FORBIDDEN for name in names) is caught


def test_only_app_imports_the_stream_framework() -> None:
    offending = [
        entry for entry in framework_imports(ROOT) if entry.split(":")[0] not in FRAMEWORK_ALLOWED
    ]
    assert not offending, "\n".join(offending)


def test_the_framework_allowance_is_still_needed() -> None:
    # An entry whose module no longer imports Faust is stale: drop it, so it cannot
    # quietly cover a later import.
    offenders = {entry.split(":")[0] for entry in framework_imports(ROOT)}
    stale = sorted(FRAMEWORK_ALLOWED - offenders)
    assert not stale, f"no longer imports the framework, drop from FRAMEWORK_ALLOWED: {stale}"


def test_the_framework_guard_finds_imports_anywhere(tmp_path: Path) -> None:
    package = tmp_path / "stream"
    sources = {
        "app/worker.py": "import faust\nfrom mode import Service",  # allowed home
        "cli/run.py": "def main():\n    import faust",
        "gateway/hub.py": "from mode.utils.times import Seconds",
        "ops/tool.py": "import importlib\nimportlib.import_module('faust.tables')",
        "publish/sink.py": "from . import mode\nimport modes\nimport orjson",  # none
    }
    for name, source in sources.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(source, encoding="utf-8")
    assert framework_imports(package) == [
        "stream/cli/run.py:2: imports faust",
        "stream/gateway/hub.py:1: imports mode.utils.times",
        "stream/ops/tool.py:2: imports faust.tables",
    ]
