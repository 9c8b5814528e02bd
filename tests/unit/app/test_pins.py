"""The versions the code was written against are the versions installed, and the locks agree.

``stream/app/`` relies on private names of faust-streaming, mode-streaming and aiokafka
(``stream.app.internals`` lists them, generated from the code and checked here), so
pyproject.toml pins all three exactly. These tests fail when a pin is loosened, when the
installed distribution differs from the pin (a venv not built from the lock), when
pyproject.toml, the modules' notes and the locks disagree, and when the edge uses a
private name the list does not hold.

The locks (README: "Dependencies and the lock files"): ``requirements-dev.lock`` is what
``make setup`` installs; ``requirements.lock`` (the image's virtualenv) and
``requirements-build.lock`` (the image builder's tools) are resolved within it, so every
version they pin is one the dev lock pins, with the same hashes.
"""

from __future__ import annotations

import ast
import importlib
import re
import tomllib
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from stream.app import internals
from stream.app.internals import AIOKAFKA_VERSION, FAUST_VERSION, MODE_VERSION

ROOT = Path(__file__).resolve().parents[3]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
LOCKS = ("requirements.lock", "requirements-dev.lock", "requirements-build.lock")

# What the edge was written against (its notes say so) and pyproject.toml pins exactly.
EXACT = {
    "faust-streaming": FAUST_VERSION,
    "mode-streaming": MODE_VERSION,
    "aiokafka": AIOKAFKA_VERSION,
}


def _requirements(lines: list[str]) -> dict[str, Requirement]:
    out = {}
    for line in lines:
        requirement = Requirement(line)
        out[canonicalize_name(requirement.name)] = requirement
    return out


RUNTIME = _requirements(PYPROJECT["project"]["dependencies"])
DEV = _requirements(PYPROJECT["project"]["optional-dependencies"]["dev"])
BUILD = _requirements(PYPROJECT["build-system"]["requires"])


PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})+)")


@dataclass(frozen=True)
class Pin:
    version: str
    hashes: frozenset[str]


def _lock(name: str) -> dict[str, Pin]:
    """``name==version`` entries of a pip-compile lock with their ``--hash`` options."""
    text = re.sub(r"\\\n", " ", (ROOT / name).read_text())
    pins: dict[str, Pin] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = PIN.fullmatch(line)
        assert match, f"{name}: not an exact, hashed pin: {line!r}"
        package = canonicalize_name(match.group(1))
        assert package not in pins, f"{name}: {package} pinned twice"
        pins[package] = Pin(match.group(2), frozenset(match.group(3).split()))
    return pins


@pytest.fixture(scope="module")
def locks() -> dict[str, dict[str, Pin]]:
    return {name: _lock(name) for name in LOCKS}


@pytest.mark.parametrize("name", sorted(EXACT))
def test_pinned_exactly_at_the_version_the_edge_was_written_against(name: str) -> None:
    requirement = RUNTIME[name]
    (specifier,) = requirement.specifier
    assert specifier.operator == "==", f"{name} must be pinned exactly, not {specifier}"
    assert "*" not in specifier.version, f"{name}: a wildcard is not an exact pin"
    assert specifier.version == EXACT[name], (
        f"pyproject.toml pins {name} {specifier.version}, the edge was written against "
        f"{EXACT[name]}: review stream.app.internals (and note 010) first"
    )


@pytest.mark.parametrize("name", sorted(EXACT))
def test_installed_is_the_pinned_version(name: str) -> None:
    (specifier,) = RUNTIME[name].specifier
    installed = version(name)
    assert installed == specifier.version, (
        f"{name} {installed} is installed, the edge was written against "
        f"{specifier.version} (pyproject.toml): rebuild the venv from the lock (make setup)"
    )


def test_every_lock_pins_exactly_with_hashes(locks: dict[str, dict[str, Pin]]) -> None:
    for name, pins in locks.items():
        assert pins, f"{name} is empty"
        for package, pin in pins.items():
            assert pin.hashes, f"{name}: {package} has no hash"


def test_runtime_and_build_locks_are_within_the_dev_lock(
    locks: dict[str, dict[str, Pin]],
) -> None:
    dev = locks["requirements-dev.lock"]
    for name in ("requirements.lock", "requirements-build.lock"):
        for package, pin in locks[name].items():
            if package == "pip" and name == "requirements-build.lock":
                continue  # pip comes first, from the build lock (Makefile, Dockerfile)
            assert package in dev, f"{name} pins {package}, the dev lock does not"
            assert pin == dev[package], f"{name} and the dev lock disagree on {package}"


def _check_pinned(requirements: dict[str, Requirement], pins: dict[str, Pin], lock: str) -> None:
    for package, requirement in requirements.items():
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        assert package in pins, f"{lock} lacks {package} ({requirement})"
        assert requirement.specifier.contains(pins[package].version, prereleases=True), (
            f"{lock} pins {package} {pins[package].version}, pyproject.toml wants {requirement}"
        )


def test_locks_satisfy_pyproject(locks: dict[str, dict[str, Pin]]) -> None:
    _check_pinned(RUNTIME, locks["requirements.lock"], "requirements.lock")
    _check_pinned(RUNTIME | DEV | BUILD, locks["requirements-dev.lock"], "requirements-dev.lock")
    _check_pinned(BUILD, locks["requirements-build.lock"], "requirements-build.lock")
    build = locks["requirements-build.lock"]
    for package in ("pip", "mypy", "orjson"):  # the image builder's tools (deploy/Dockerfile)
        assert package in build, f"requirements-build.lock lacks {package}"


def test_dev_only_packages_stay_out_of_the_runtime_lock(
    locks: dict[str, dict[str, Pin]],
) -> None:
    runtime = locks["requirements.lock"]
    for package in ("pytest", "hypothesis", "ruff", "mypy", "playwright", "setuptools", "pip"):
        assert package not in runtime, f"requirements.lock (the image) pins {package}"


@pytest.mark.parametrize("name", sorted(EXACT))
def test_locks_pin_the_exact_versions(name: str, locks: dict[str, dict[str, Pin]]) -> None:
    for lock in ("requirements.lock", "requirements-dev.lock"):
        assert locks[lock][name].version == EXACT[name], f"{lock}: {name}"


# -- the private names the edge relies on (stream.app.internals) -----------------------------

LIBRARIES = ("faust", "mode", "aiokafka")


def _private_names_used(root: Path) -> dict[str, set[str]]:
    """Private names ``root``'s modules use: attributes, defined methods (overrides) and
    names given to getattr/setattr/hasattr, by the files that use them."""
    used: dict[str, set[str]] = {}
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = None
            if isinstance(node, ast.Attribute):
                name = node.attr
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                name = node.name
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "setattr", "hasattr")
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                name = node.args[1].value
            if name and name.startswith("_") and not name.startswith("__"):
                used.setdefault(name, set()).add(path.name)
    return used


def _library_names() -> set[str]:
    """Every private identifier the installed libraries' sources spell."""
    found: set[str] = set()
    for library in LIBRARIES:
        base = Path(importlib.import_module(library).__file__ or "").parent
        for source in base.rglob("*"):
            if source.suffix in (".py", ".pyi", ".pyx"):
                text = source.read_text(encoding="utf-8", errors="ignore")
                found.update(re.findall(r"\b_[A-Za-z][A-Za-z0-9_]*", text))
    return found


def test_the_list_of_private_names_is_the_code_s() -> None:
    """Generated from the code: a private name of the libraries used under stream/app/ and
    not listed (or listed and no longer used) fails here. The edge's own private names
    must not collide with the libraries' (rename them: the list is what we rely on)."""
    used = _private_names_used(ROOT / "stream" / "app")
    theirs = {name for name in used if name in _library_names()}
    listed = set(internals.RELIED_ON)
    assert not theirs - listed, {n: sorted(used[n]) for n in sorted(theirs - listed)}
    assert not listed - theirs, sorted(listed - theirs)


def test_every_patched_module_name_exists() -> None:
    for module_name, names in internals.PATCHED.items():
        module = importlib.import_module(module_name)
        for name in names:
            assert hasattr(module, name), f"{module_name}.{name}"
