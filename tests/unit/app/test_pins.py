"""The versions the code was written against are the versions installed, and the locks agree.

``stream/`` relies on private names of faust-streaming, mode-streaming, aiokafka and
aiohttp (``stream.app.internals`` lists them with their owners, and is checked here), so
pyproject.toml pins all four exactly. These tests fail when a pin is loosened, when the
installed distribution differs from the pin (a venv not built from the lock), when
pyproject.toml, the modules' notes and the locks disagree, when code under ``stream/``
uses a private name of theirs the list does not hold (or the list holds one no longer
used), and when a listed name is not on the owner the list says it is read from.

The locks (README: "Dependencies and the lock files"): ``requirements-dev.lock`` is what
``make setup`` installs; ``requirements.lock`` (the image's virtualenv) and
``requirements-build.lock`` (the image builder's tools) are resolved within it, so every
version they pin is one the dev lock pins, with the same hashes.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from stream.app import internals
from stream.app.internals import AIOHTTP_VERSION, AIOKAFKA_VERSION, FAUST_VERSION, MODE_VERSION

ROOT = Path(__file__).resolve().parents[3]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
LOCKS = ("requirements.lock", "requirements-dev.lock", "requirements-build.lock")

# What the edge was written against (its notes say so) and pyproject.toml pins exactly.
EXACT = {
    "faust-streaming": FAUST_VERSION,
    "mode-streaming": MODE_VERSION,
    "aiokafka": AIOKAFKA_VERSION,
    "aiohttp": AIOHTTP_VERSION,
}


def _requirements(lines: list[str]) -> dict[str, Requirement]:
    out: dict[str, Requirement] = {}
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


# -- the private names the code relies on (stream.app.internals) -----------------------------

LIBRARIES = ("faust", "mode", "aiokafka", "aiohttp")
STREAM = ROOT / "stream"
# namedtuple's own API (documented, underscored so as not to clash with field names)
NAMEDTUPLE_API = frozenset({"_asdict", "_replace", "_fields", "_make", "_field_defaults"})


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _of_library(klass: type) -> bool:
    return klass.__module__.split(".")[0] in LIBRARIES


@cache
def _class_source_names(klass: type) -> frozenset[str]:
    """Names a class's own source defines: methods, class-level names, ``self.X`` stores
    (its instance attributes, which ``hasattr`` on the class cannot see)."""
    try:
        source = textwrap.dedent(inspect.getsource(klass))
    except (OSError, TypeError):  # a compiled class: hasattr sees its names
        return frozenset()
    (node,) = ast.parse(source).body
    assert isinstance(node, ast.ClassDef)
    names: set[str] = set()
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(item.name)
        elif isinstance(item, ast.Assign):
            names.update(t.id for t in item.targets if isinstance(t, ast.Name))
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            names.add(item.target.id)
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Attribute)
            and isinstance(sub.ctx, ast.Store)
            and isinstance(sub.value, ast.Name)
            and sub.value.id == "self"
        ):
            names.add(sub.attr)
    return frozenset(names)


def defines(owner: object, name: str) -> bool:
    """``owner`` (a library's class or module) has ``name``: an attribute of it, or, for a
    class, a name the source of one of its library classes defines on its instances."""
    if hasattr(owner, name):
        return True
    if isinstance(owner, type):
        return any(name in _class_source_names(k) for k in owner.__mro__ if _of_library(k))
    return False


def resolve(path: str) -> object:
    """``"package.module:Class"`` (or ``"package.module"``) as the object it names: the
    library's own class where ``stream.app.patches`` put a subclass of it in its place."""
    module_name, _, qualname = path.partition(":")
    target: object = importlib.import_module(module_name)
    for part in qualname.split(".") if qualname else ():
        target = getattr(target, part)
    if isinstance(target, type) and not _of_library(target):
        for klass in target.__mro__:
            if (klass.__module__, klass.__qualname__) == (module_name, qualname):
                return klass
    return target


@cache
def _library_tokens() -> frozenset[str]:
    """Every private identifier the installed libraries' sources spell: a name used on
    something other than ``self`` is theirs only if they spell it."""
    found: set[str] = set()
    for library in LIBRARIES:
        base = Path(importlib.import_module(library).__file__ or "").parent
        for source in base.rglob("*"):
            if source.suffix in (".py", ".pyi", ".pyx"):
                text = source.read_text(encoding="utf-8", errors="ignore")
                found.update(re.findall(r"\b_[A-Za-z][A-Za-z0-9_]*", text))
    return frozenset(found)


def _imports(tree: ast.Module, module_name: str) -> dict[str, object]:
    """What a module's top-level imports bind; the module itself is not run (an entry
    point builds an app on import, a ``__main__`` runs its command)."""
    package = module_name.rpartition(".")[0]
    namespace: dict[str, object] = {"__name__": module_name, "__package__": package}
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            code = compile(ast.Module(body=[node], type_ignores=[]), module_name, "exec")
            exec(code, namespace)  # an import statement of our own code, nothing else
    return namespace


@dataclass
class _Module:
    rel: str
    tree: ast.Module
    namespace: dict[str, object]


def _modules(root: Path) -> list[_Module]:
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = str(path.relative_to(root.parent))
        name = rel.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        out.append(_Module(rel, tree, _imports(tree, name)))
    return out


def _library_bases(modules: list[_Module]) -> dict[tuple[str, str], set[type]]:
    """Each class defined under the root (by file and name) -> the library classes it
    stands on: its bases' and, for a mixin, those of the classes it is mixed into (its
    ``self`` is theirs too)."""
    found: dict[tuple[str, str], set[type]] = {}
    parents: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for module in modules:
        for cls in (n for n in ast.walk(module.tree) if isinstance(n, ast.ClassDef)):
            key = (module.rel, cls.name)
            found.setdefault(key, set())
            parents.setdefault(key, set())
            for base in cls.bases:
                if isinstance(base, ast.Subscript):  # list[Any], Request[T]: the class
                    base = base.value
                text = ast.unparse(base)
                if (module.rel, text) in found:  # a class of the same file, defined above
                    parents[key].add((module.rel, text))
                    continue
                # An imported name: one that does not resolve fails the scan rather
                # than hide a library base.
                value = eval(text, dict(module.namespace))
                if not isinstance(value, type):
                    continue  # typing's Generic, Protocol and the like
                found[key].update(k for k in value.__mro__ if _of_library(k))
                if value.__module__.startswith("stream."):
                    path = value.__module__.replace(".", "/") + ".py"
                    if not (ROOT / path).exists():
                        path = value.__module__.replace(".", "/") + "/__init__.py"
                    parents[key].add((path, value.__name__))
    changed = True
    while changed:  # down from bases, up into mixins, until nothing moves
        changed = False
        for key, ups in parents.items():
            for up in ups:
                both = found.setdefault(up, set()) | found[key]
                if both != found[key] or both != found[up]:
                    found[key], found[up] = set(both), set(both)
                    changed = True
    return found


def private_names_used(root: Path) -> dict[str, set[str]]:
    """The private names of the libraries the code under ``root`` uses, by the files that
    use them: a name its classes override or read on ``self`` that one of their library
    classes defines; a name read on anything else (or given to getattr, setattr, hasattr)
    that the libraries spell and the code does not define itself."""
    modules = _modules(root)
    library = _library_bases(modules)
    theirs: dict[str, set[str]] = {}
    own: set[str] = set()
    loose: dict[str, set[str]] = {}  # used on something not ``self``

    def on_library(bases: set[type], name: str) -> bool:
        return any(hasattr(k, name) or name in _class_source_names(k) for k in bases)

    for module in modules:
        for node in module.tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                own.add(node.name)
            elif isinstance(node, ast.Assign):
                own.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                own.add(node.target.id)
        on_self: set[int] = set()
        for cls in (n for n in ast.walk(module.tree) if isinstance(n, ast.ClassDef)):
            bases = library[module.rel, cls.name]
            for item in cls.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    names = [item.name]
                elif isinstance(item, ast.Assign):
                    names = [t.id for t in item.targets if isinstance(t, ast.Name)]
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names = [item.target.id]
                else:
                    continue
                for defined in filter(_private, names):
                    if on_library(bases, defined):  # an override, or a declaration of theirs
                        theirs.setdefault(defined, set()).add(module.rel)
                    else:
                        own.add(defined)
            for sub in ast.walk(cls):
                if (
                    isinstance(sub, ast.Attribute)
                    and isinstance(sub.value, ast.Name)
                    and sub.value.id == "self"
                    and _private(sub.attr)
                ):
                    on_self.add(id(sub))
                    if on_library(bases, sub.attr):
                        theirs.setdefault(sub.attr, set()).add(module.rel)
                    elif isinstance(sub.ctx, ast.Store):
                        own.add(sub.attr)
        for found in ast.walk(module.tree):
            name: str | None = None
            if isinstance(found, ast.Attribute) and id(found) not in on_self:
                receiver = found.value
                if isinstance(receiver, ast.Name):
                    bound = module.namespace.get(receiver.id)
                    if inspect.ismodule(bound) and bound.__name__.split(".")[0] not in LIBRARIES:
                        continue  # the standard library's (os._exit, sys._getframe)
                name = found.attr
            elif (
                isinstance(found, ast.Call)
                and isinstance(found.func, ast.Name)
                and found.func.id in ("getattr", "setattr", "hasattr")
                and len(found.args) > 1
                and isinstance(found.args[1], ast.Constant)
                and isinstance(found.args[1].value, str)
            ):
                name = found.args[1].value
            if name is not None and _private(name) and name not in NAMEDTUPLE_API:
                loose.setdefault(name, set()).add(module.rel)
    tokens = _library_tokens()
    for name, files in loose.items():
        if name in tokens and name not in own:
            theirs.setdefault(name, set()).update(files)
    return theirs


def test_the_list_of_private_names_is_the_code_s() -> None:
    """Generated from the code under ``stream/``: a private name of the libraries used and
    not listed (or listed and no longer used) fails here. On ``self`` the scan knows the
    class (a library's name there is theirs, even where our class also sets it); on
    anything else it cannot know the receiver's type, and a name the code under
    ``stream/`` defines itself is taken for ours: a private name of our own should not
    be one the libraries use on what we read."""
    used = private_names_used(STREAM)
    listed = set(internals.RELIED_ON)
    assert not set(used) - listed, {n: sorted(used[n]) for n in sorted(set(used) - listed)}
    assert not listed - set(used), sorted(listed - set(used))


@pytest.mark.parametrize("name", sorted(internals.RELIED_ON))
def test_each_listed_name_is_on_its_owner(name: str) -> None:
    """Each name is checked on the class (or module) the list says it is read from: an
    upgrade that renames or moves it fails here, wherever else the library spells it."""
    borrowed = internals.RELIED_ON[name]
    assert borrowed.owners and borrowed.why
    for path in borrowed.owners:
        owner = resolve(path)
        assert _of_library(owner if isinstance(owner, type) else type(owner)) or (
            inspect.ismodule(owner) and owner.__name__.split(".")[0] in LIBRARIES
        ), f"{name}: {path} is not faust's, mode's, aiokafka's or aiohttp's"
        assert defines(owner, name), f"{path} has no {name}: review stream.app.internals"


def test_every_patched_module_name_exists() -> None:
    for module_name, names in internals.PATCHED.items():
        module = importlib.import_module(module_name)
        for name in names:
            assert hasattr(module, name), f"{module_name}.{name}"


# -- the scan and the owner check catch what they are for ------------------------------------

USES = """
from aiohttp import web
from faust.transport.drivers import aiokafka as faust_aiokafka


class Site(web.BaseSite):
    def _mine(self):
        return self._server  # BaseSite's

    async def start(self):
        self._own = 1  # ours


class Mixin:
    def _new_offset(self, tp):  # Faust's Consumer's, once mixed in below
        return None


class Consumer(Mixin, faust_aiokafka.Consumer):
    pass


def positions(app):
    return app._consumer._committed_offset  # Faust's, on something not self
"""


def test_the_scan_finds_overrides_self_reads_mixins_and_reads_on_other_objects(
    tmp_path: Path,
) -> None:
    root = tmp_path / "stream"
    root.mkdir()
    (root / "uses.py").write_text(USES)
    used = private_names_used(root)
    assert set(used) == {"_server", "_new_offset", "_consumer", "_committed_offset"}, used


def test_a_name_on_the_wrong_owner_is_refused() -> None:
    """Not "the token appears somewhere in the library": on the owner named."""
    assert defines(resolve("aiohttp.web_runner:BaseSite"), "_server")  # a slot
    assert defines(resolve("faust.transport.consumer:Consumer"), "_committed_offset")
    assert not defines(resolve("faust.transport.consumer:Consumer"), "_server")
    assert not defines(resolve("aiohttp.web_runner:BaseSite"), "_committed_offset")
