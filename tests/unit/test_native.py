"""The compiled core (stream/native.py): used only while it matches the sources, and folding
exactly as they do.

The staleness checks need no build (a fake build in a temporary tree); the tests that load
the real build skip when ``python -m stream.native build`` (``make setup``) has not run.
Subprocesses run with and without ``STREAM_PURE_PYTHON=1`` whatever this run's setting.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from stream import native

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "docs" / "examples").glob("*.jsonl"))
FOUND = native.find_build(environ={})
needs_build = pytest.mark.skipif(
    isinstance(FOUND, str),
    reason=f"compiled core unavailable: {FOUND}; `make setup` builds it",
)

# Imports of mypy's own packages fail in the subprocess: the image ships without them.
_NO_MYPY = """
import sys
class NoMypy:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {"mypy", "mypyc", "librt", "mypy_extensions"}:
            raise ImportError(f"{name} is not installed in the image")
        return None
sys.meta_path.insert(0, NoMypy())
"""


def _env(pure: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != native.PURE_PYTHON_ENV}
    if pure:
        env[native.PURE_PYTHON_ENV] = "1"
    return env


def _run(args: list[str], pure: bool, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=_env(pure),
        capture_output=True,
        check=check,
        timeout=120,
    )


def _python(code: str, pure: bool, *args: str) -> subprocess.CompletedProcess[bytes]:
    return _run(["-c", _NO_MYPY + code, *args], pure)


# -- the real build ------------------------------------------------------------------------


@needs_build
@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "pure"])
def test_core_modules_come_from_the_build_unless_disabled(pure: bool) -> None:
    code = """
import importlib, json
from stream import native
files = {m: importlib.import_module(m).__file__ for m in native.CORE}
print(json.dumps({"active": native.ACTIVE, "status": native.status(), "files": files}))
"""
    seen = json.loads(_python(code, pure).stdout)
    assert seen["active"] is not pure, seen["status"]
    for module in native.CORE:
        loaded = Path(seen["files"][module])
        if pure:
            assert loaded == native.source_path(module)
        else:
            assert loaded.is_relative_to(native.NATIVE_DIR), module
            assert loaded.name.endswith(native.abi_tag())
    if pure:
        assert "disabled by STREAM_PURE_PYTHON=1" in seen["status"]


def _fold(pure: bool, *options: str) -> bytes:
    code = """
import sys
from stream import native
assert native.ACTIVE is (sys.argv[1] == "compiled"), native.status()
from stream.cli import main
sys.exit(main(sys.argv[2:]))
"""
    paths = [str(path) for path in EXAMPLES]
    mode = "pure" if pure else "compiled"
    return _python(code, pure, mode, "fold", *options, *paths).stdout


@needs_build
@pytest.mark.parametrize("options", [(), ("--every-event",)], ids=["sessions", "every-event"])
def test_compiled_and_pure_python_fold_the_examples_identically(options: tuple[str]) -> None:
    assert EXAMPLES
    compiled = _fold(False, *options)
    assert compiled.count(b"\n") >= len(EXAMPLES)
    assert compiled == _fold(True, *options)


def _status(pure: bool) -> subprocess.CompletedProcess[str]:
    done = _run(["-m", "stream.native", "status"], pure, check=False)
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


@needs_build
def test_status_command_imports_the_whole_core_from_the_build() -> None:
    done = _status(False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("compiled core: active"), done.stdout
    assert "RuntimeWarning" not in done.stderr


def test_status_command_fails_when_disabled() -> None:
    done = _status(True)
    assert done.returncode == 1
    assert done.stdout.strip() == "compiled core: pure Python (disabled by STREAM_PURE_PYTHON=1)"


# -- staleness, on a fake build --------------------------------------------------------------

GROUP = "0123456789abcdef0123__mypyc"


def _write_manifest(native_dir: Path, **changes: Any) -> None:
    (native_dir / native.MANIFEST).write_text(json.dumps(_manifest(native_dir) | changes))


def _manifest(native_dir: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((native_dir / native.MANIFEST).read_text())
    return loaded


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the core sources plus a "build" of them: right manifest, empty extensions."""
    root = tmp_path / "src"
    native_dir = root / "stream" / "_native"
    extensions = {GROUP: GROUP + native.abi_tag()}
    for module in native.CORE:
        source = native.source_path(module, root)
        source.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(native.source_path(module), source)
        extensions[module] = module.replace(".", "/") + native.abi_tag()
    for relative in extensions.values():
        (native_dir / relative).parent.mkdir(parents=True, exist_ok=True)
        (native_dir / relative).write_bytes(b"not an ELF file")
    manifest = {
        "format": native.FORMAT,
        "abi": native.abi_tag(),
        "group": GROUP,
        "extensions": extensions,
        "sources": {
            module: native._digest(native.source_path(module, root)) for module in native.CORE
        },
    }
    (native_dir / native.MANIFEST).write_text(json.dumps(manifest))
    return root


def _find(root: Path, **environ: str) -> native.Build | str:
    return native.find_build(root / "stream" / "_native", root, environ)


def test_a_matching_build_is_found(tree: Path) -> None:
    found = _find(tree)
    assert isinstance(found, native.Build), found
    assert found.group == GROUP
    assert set(found.extensions) == {GROUP, *native.CORE}
    processor = found.extensions["stream.session.processor"]
    assert processor == tree / "stream/_native/stream/session" / ("processor" + native.abi_tag())


def test_an_edited_source_makes_the_build_stale(tree: Path) -> None:
    source = native.source_path("stream.session.processor", tree)
    source.write_text(source.read_text() + "\n# an edit\n")
    assert _find(tree) == "stale: stream/session/processor.py changed since the build"


def test_every_source_is_checked(tree: Path) -> None:
    for module in native.CORE:
        source = native.source_path(module, tree)
        original = source.read_bytes()
        source.write_bytes(original.replace(b"\n", b"\r\n", 1))
        assert isinstance(_find(tree), str), f"an edit of {module} went unnoticed"
        source.write_bytes(original)
        assert isinstance(_find(tree), native.Build)


def test_several_edits_and_a_removed_source(tree: Path) -> None:
    native.source_path("stream.contract.events", tree).write_text("")
    native.source_path("stream.pricing.estimate", tree).unlink()
    assert _find(tree) == "stale: stream/contract/events.py (and 1 more) changed since the build"


def test_pure_python_switch(tree: Path) -> None:
    assert _find(tree, STREAM_PURE_PYTHON="1") == "disabled by STREAM_PURE_PYTHON=1"
    assert isinstance(_find(tree, STREAM_PURE_PYTHON="0"), native.Build)


def test_no_build(tree: Path) -> None:
    (tree / "stream/_native" / native.MANIFEST).unlink()
    assert _find(tree) == "not built (python -m stream.native build)"


def test_unreadable_manifest(tree: Path) -> None:
    (tree / "stream/_native" / native.MANIFEST).write_text("{")
    assert str(_find(tree)).startswith("unreadable stream/_native/manifest.json")


def test_another_interpreter(tree: Path) -> None:
    _write_manifest(tree / "stream/_native", abi=".cpython-312-x86_64-linux-gnu.so")
    tag = native.abi_tag()
    assert (
        _find(tree) == f"built for .cpython-312-x86_64-linux-gnu.so, this interpreter loads {tag}"
    )


def test_another_module_list(tree: Path) -> None:
    native_dir = tree / "stream/_native"
    sources = _manifest(native_dir)["sources"]
    del sources["stream.session.offline"]
    _write_manifest(native_dir, sources=sources)
    assert str(_find(tree)).startswith("stale: the build compiled another module list")


def test_another_manifest_format(tree: Path) -> None:
    _write_manifest(tree / "stream/_native", format=native.FORMAT + 1)
    assert str(_find(tree)).startswith("built by another version of stream.native")


def test_a_missing_extension(tree: Path) -> None:
    (tree / "stream/_native" / (GROUP + native.abi_tag())).unlink()
    assert _find(tree) == f"incomplete build: stream/_native/{GROUP}{native.abi_tag()} is missing"


# -- activate() ----------------------------------------------------------------------------


def test_activate_never_raises_and_leaves_no_finder_when_the_build_cannot_load(
    tree: Path,
) -> None:
    """In a fresh process (no core module imported yet): the group library fails to load."""
    code = """
import json, sys
from pathlib import Path
from stream import native
root = Path(sys.argv[1])
active = native.activate(root / "stream" / "_native", root, {})
import stream.session.processor
print(json.dumps({
    "active": active,
    "status": native.status(),
    "finders": sum(isinstance(f, native.CompiledCoreFinder) for f in sys.meta_path),
    "processor": stream.session.processor.__file__,
}))
"""
    seen = json.loads(_python(code, True, str(tree)).stdout)
    assert seen["active"] is False
    assert seen["status"].startswith("compiled core: pure Python (failed to load: ImportError")
    assert seen["finders"] == 0
    assert seen["processor"] == str(native.source_path("stream.session.processor"))


def test_activate_refuses_after_the_core_was_imported_as_python(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import stream.session.processor  # noqa: F401  (already imported by the suite)

    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(native, "ACTIVE", native.ACTIVE)
    monkeypatch.setattr(native, "REASON", native.REASON)
    assert native.activate(tree / "stream" / "_native", tree, {}) is False
    assert re.fullmatch(
        r"compiled core: pure Python \(stream\.\S+ was imported before activation\)",
        native.status(),
    )
    assert not any(isinstance(f, native.CompiledCoreFinder) for f in sys.meta_path)


def test_the_finder_claims_exactly_the_build(tmp_path: Path) -> None:
    location = tmp_path / ("errors" + native.abi_tag())
    finder = native.CompiledCoreFinder({"stream.contract.errors": location})
    spec = finder.find_spec("stream.contract.errors")
    assert spec is not None
    assert spec.origin == str(location)
    assert type(spec.loader).__name__ == "ExtensionFileLoader"
    assert finder.find_spec("stream.contract.events") is None
    assert finder.find_spec("stream.contract") is None


def test_the_core_imports_no_other_stream_module() -> None:
    """A build is checked against the core's sources only, so compiled code must not depend
    on a stream module whose edits would not make it stale."""
    packages = {module.rpartition(".")[0] for module in native.CORE}
    for package in packages:
        init = ast.parse((ROOT.joinpath(*package.split(".")) / "__init__.py").read_text())
        assert not any(isinstance(n, ast.Import | ast.ImportFrom) for n in ast.walk(init))
    for module in native.CORE:
        for node in ast.walk(ast.parse(native.source_path(module).read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module in packages:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module is not None:
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] != "stream" or name in native.CORE, (module, name)


# -- the build is wired into make and the image ------------------------------------------------


def test_the_makefile_rebuilds_on_every_core_source() -> None:
    makefile = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    (line,) = re.findall(r"^NATIVE_SOURCES := (.*)$", makefile, flags=re.M)
    patterns = line.replace("$(wildcard", " ").replace(")", " ").split()
    for module in native.CORE:
        source = native.source_path(module).relative_to(ROOT)
        assert any(source.match(pattern) for pattern in patterns), module


def test_the_wheel_and_the_image_carry_the_build() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "_native/**/*" in pyproject["tool"]["setuptools"]["package-data"]["stream"]
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert 0 <= dockerfile.index("-m stream.native build") < dockerfile.index("pip wheel")
    assert "-m stream.native status" in dockerfile
