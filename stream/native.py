"""The compiled core: the typed pure core compiled by mypyc from the same source.

``python -m stream.native build`` compiles the modules in ``CORE`` with mypyc into
``stream/_native/`` (never next to the sources) and writes ``manifest.json`` there: the
SHA-256 of every compiled source, the interpreter's extension-module ABI, and the modules
the build produced (one extension per core module plus mypyc's shared group library,
``<hash>__mypyc``, which those import).

``activate()`` (called once by ``import stream``) puts the compiled modules in front of the
sources with a meta-path finder, but only when *every* core source still hashes to what
was compiled, the ABI matches and the group library loads; anything else, or
``STREAM_PURE_PYTHON=1``, leaves the pure-Python modules in charge. It never raises: an
edited source silently runs as Python until the next build. ``ACTIVE`` and ``status()``
say which one runs and why (``python -m stream.native status``).

docs/notes/012-compiled-core.md has the reasons and the figures.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Any, Final, NamedTuple

# The fold's typed pure core, in import order. Every module here is compiled into one group
# and used compiled or not at all: compiled modules call each other natively.
CORE: Final = (
    "stream.contract.errors",
    "stream.contract.events",
    "stream.contract.jsontext",
    "stream.contract.storage",
    "stream.contract.data",
    "stream.output.headers",
    "stream.pricing.jslength",
    "stream.pricing.estimate",
    "stream.projections.base",
    "stream.projections.claim",
    "stream.projections.positional",
    "stream.projections.breakdown",
    "stream.projections.pressure",
    "stream.projections.usage",
    "stream.session.processor",
    "stream.session.offline",
    "stream.session.codec",
    "stream.session.partition",
    "stream.session.limits",
    "stream.session.results",
    "stream.session.input",
    "stream.session.batch",
)

SOURCE_ROOT: Final = Path(__file__).resolve().parent.parent  # the directory holding stream/
NATIVE_DIR: Final = SOURCE_ROOT / "stream" / "_native"
MANIFEST: Final = "manifest.json"
FORMAT: Final = 1
PURE_PYTHON_ENV: Final = "STREAM_PURE_PYTHON"

ACTIVE: bool = False
REASON: str = "not activated"

# `import stream` imports this module before `python -m stream.native` runs it as __main__,
# which runpy reports as a RuntimeWarning; harmless here (main() reads the imported copy).
warnings.filterwarnings(
    "ignore", message=r"'stream\.native' found in sys\.modules", category=RuntimeWarning
)

# Run by `build` in a scratch directory, never the repository: setuptools reads the
# pyproject.toml of its working directory, and the venv's may be too old for ours.
_SETUP = """\
import json
import sys

from mypyc.build import mypycify
from setuptools import setup

request = json.load(open("request.json"))
extensions = mypycify(request["paths"], opt_level=request["opt_level"])
json.dump([extension.name for extension in extensions], open("extensions.json", "w"))
setup(name="stream-native", ext_modules=extensions, script_args=sys.argv[1:])
"""


class Build(NamedTuple):
    """A build that matches the sources and this interpreter: what ``activate`` loads."""

    group: str  # mypyc's shared library, imported by every compiled module
    extensions: dict[str, Path]  # module name (the group included) -> extension file


def source_path(module: str, root: Path = SOURCE_ROOT) -> Path:
    return root.joinpath(*module.split(".")).with_suffix(".py")


def abi_tag() -> str:
    """What an extension module must be built for to load here (the EXT_SUFFIX)."""
    return importlib.machinery.EXTENSION_SUFFIXES[0]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _shown(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def find_build(
    native_dir: Path = NATIVE_DIR,
    source_root: Path = SOURCE_ROOT,
    environ: Mapping[str, str] = os.environ,
) -> Build | str:
    """The build to load, or why the pure-Python core runs. Reads files; loads nothing."""
    if environ.get(PURE_PYTHON_ENV) == "1":
        return f"disabled by {PURE_PYTHON_ENV}=1"
    manifest_path = native_dir / MANIFEST
    try:
        manifest: Any = json.loads(manifest_path.read_bytes())
    except FileNotFoundError:
        return "not built (python -m stream.native build)"
    except (OSError, ValueError) as error:
        return f"unreadable {_shown(manifest_path, source_root)}: {error}"
    if type(manifest) is not dict or manifest.get("format") != FORMAT:
        return "built by another version of stream.native: rebuild (python -m stream.native build)"
    if manifest.get("abi") != abi_tag():
        return f"built for {manifest.get('abi')}, this interpreter loads {abi_tag()}"
    sources = manifest.get("sources")
    if type(sources) is not dict or list(sources) != list(CORE):
        return "stale: the build compiled another module list than stream.native.CORE"
    changed = []
    for module, digest in sources.items():
        path = source_path(module, source_root)
        try:
            if _digest(path) != digest:
                changed.append(_shown(path, source_root))
        except OSError:
            changed.append(_shown(path, source_root))
    if changed:
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        return f"stale: {changed[0]}{more} changed since the build"
    group = manifest.get("group")
    files = manifest.get("extensions")
    if type(group) is not str or type(files) is not dict or group not in files:
        return f"malformed {_shown(manifest_path, source_root)}: rebuild"
    extensions = {}
    for module, relative in files.items():
        path = native_dir / str(relative)
        if not path.is_file():
            return f"incomplete build: {_shown(path, source_root)} is missing"
        extensions[str(module)] = path
    return Build(group, extensions)


def _loaded_elsewhere(module: str, path: Path) -> bool:
    loaded = sys.modules.get(module)
    return loaded is not None and getattr(loaded, "__file__", None) != str(path)


class CompiledCoreFinder:
    """Finds exactly the modules of one build, as their compiled extension files.

    A meta path finder needs only ``find_spec``; not subclassing
    ``importlib.abc.MetaPathFinder`` spares every command importing ``importlib.abc``
    (and ``importlib.resources`` with it: ~9 ms of start-up)."""

    def __init__(self, extensions: Mapping[str, Path]) -> None:
        self.extensions = dict(extensions)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        location = self.extensions.get(fullname)
        if location is None:
            return None
        return importlib.util.spec_from_file_location(fullname, location)


def activate(
    native_dir: Path = NATIVE_DIR,
    source_root: Path = SOURCE_ROOT,
    environ: Mapping[str, str] = os.environ,
) -> bool:
    """Use the compiled core if it matches the sources; otherwise Python. Never raises."""
    global ACTIVE, REASON
    finder = None
    try:
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, CompiledCoreFinder)]
        found = find_build(native_dir, source_root, environ)
        if isinstance(found, str):
            REASON = found
        elif mixed := [m for m, path in found.extensions.items() if _loaded_elsewhere(m, path)]:
            REASON = f"{mixed[0]} was imported before activation"
        else:
            finder = CompiledCoreFinder(found.extensions)
            sys.meta_path.insert(0, finder)
            # Load the group library now, so that a build that cannot load here falls back
            # to Python instead of failing the first import of a core module.
            importlib.import_module(found.group)
            REASON = f"active ({len(CORE)} modules from {_shown(native_dir, source_root)})"
    except Exception as error:  # any problem at all means pure Python
        if finder is not None and finder in sys.meta_path:
            sys.meta_path.remove(finder)
        finder = None
        REASON = f"failed to load: {type(error).__name__}: {error}"
    ACTIVE = finder is not None
    return ACTIVE


def status() -> str:
    """One line for logs: ``compiled core: active (...)`` or ``... pure Python (why)``."""
    return f"compiled core: {REASON}" if ACTIVE else f"compiled core: pure Python ({REASON})"


def build(out: Path = NATIVE_DIR, *, opt_level: str = "3", verbose: bool = False) -> Path:
    """Compile ``CORE`` with mypyc into ``out`` (replaced whole) and write its manifest.

    The extensions are built into a fresh sibling directory which then replaces ``out`` by
    rename: a running process that mapped the previous build keeps its files.
    """
    import shutil
    import subprocess
    import tempfile

    import mypy.version

    paths = [source_path(module) for module in CORE]
    before = {module: _digest(path) for module, path in zip(CORE, paths, strict=True)}
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
    try:
        with tempfile.TemporaryDirectory(prefix="stream-native-") as scratch:
            work = Path(scratch)
            (work / "setup.py").write_text(_SETUP)
            request = {"paths": [str(path) for path in paths], "opt_level": opt_level}
            (work / "request.json").write_text(json.dumps(request))
            command = [sys.executable, "setup.py"]
            command += ["build_ext", "--build-lib", str(staged), "--build-temp", str(work / "tmp")]
            output = None if verbose else subprocess.PIPE
            done = subprocess.run(
                command, cwd=work, stdout=output, stderr=subprocess.STDOUT, check=False
            )
            if done.returncode != 0:
                log = done.stdout.decode(errors="replace") if done.stdout else ""
                raise RuntimeError(f"mypyc build failed (exit {done.returncode})\n{log}")
            names = json.loads((work / "extensions.json").read_text())
        after = {module: _digest(path) for module, path in zip(CORE, paths, strict=True)}
        if after != before:
            raise RuntimeError("core sources changed during the build; build again")
        extensions = {}
        for name in names:
            relative = name.replace(".", "/") + abi_tag()
            if not (staged / relative).is_file():
                raise RuntimeError(f"mypyc did not produce {relative}")
            extensions[name] = relative
        groups = [name for name in names if name not in CORE]
        if len(groups) != 1 or set(names) - set(groups) != set(CORE):
            raise RuntimeError(f"unexpected extensions from mypyc: {names}")
        manifest = {
            "format": FORMAT,
            "abi": abi_tag(),
            "python": sys.version.split()[0],
            "mypy": mypy.version.__version__,
            "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "group": groups[0],
            "extensions": extensions,
            "sources": before,
        }
        (staged / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        staged.chmod(0o755)
        if out.exists():
            retired = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            out.rename(retired / out.name)
            staged.rename(out)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            staged.rename(out)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m stream.native",
        description="The mypyc-compiled fold core (docs/notes/012-compiled-core.md).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    build_command = commands.add_parser(
        "build", help=f"compile the core into {_shown(NATIVE_DIR, SOURCE_ROOT)}/"
    )
    build_command.add_argument("--verbose", action="store_true", help="show mypyc's output")
    commands.add_parser(
        "status",
        help="whether the compiled core is in use (every core module imported), and why not;"
        " exit 1 if not",
    )
    args = parser.parse_args(argv)
    # Run as `python -m`, this module is __main__; `import stream` activated the other copy.
    from stream import native

    if args.command == "build":
        start = time.perf_counter()
        try:
            out = build(verbose=args.verbose)
        except RuntimeError as error:
            print(f"stream.native build: {error}", file=sys.stderr)
            return 1
        elapsed = time.perf_counter() - start
        print(f"compiled core: {len(CORE)} modules built into {out} in {elapsed:.1f} s")
        return 0
    if native.ACTIVE:
        # Import the whole core, as the worker will: every module must come from the build.
        for module in CORE:
            try:
                origin = getattr(importlib.import_module(module), "__file__", None) or "?"
            except ImportError as error:
                origin = f"nowhere: {error}"
            if not origin.endswith(abi_tag()):
                print(f"compiled core: broken ({module} loaded from {origin})")
                return 1
    print(native.status())
    return 0 if native.ACTIVE else 1


if __name__ == "__main__":
    raise SystemExit(main())
