"""The fold core is pure: no I/O, clocks, networking or service frameworks.

The sources are parsed, never imported, so a forbidden import anywhere in a module
(top level, inside a function, under ``TYPE_CHECKING``, via ``importlib``) is caught
without running it.
"""

import ast
from pathlib import Path

import pytest

import stream

PURE_PACKAGES = ("contract", "pricing", "projections", "session")
# Not the core, but held to the same rule: the event factory of the tests and benchmarks.
ALSO_PURE = ("testing",)
FORBIDDEN = frozenset(
    {
        "faust",
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
