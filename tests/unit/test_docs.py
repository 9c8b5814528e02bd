"""The docs match the code: the README's layout, the names the docs cite, the size of
docs/performance.md (issue 53: "every module and note named in the README exists")."""

import ast
import functools
import io
import re
import tokenize
from pathlib import Path

import pytest
import yaml

from tests import layout

ROOT = Path(__file__).resolve().parents[2]
STREAM = ROOT / "stream"
NOTES = ROOT / "docs" / "notes"
PACKAGES = sorted(p.name for p in STREAM.iterdir() if (p / "__init__.py").is_file())
# Prose that names the code: the README and docs/ (the notes included). CHANGELOG.md is
# history: it may name what a release removed.
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# Where a note may be cited: everything the project writes by hand.
CITING = [
    *DOCS,
    ROOT / "CHANGELOG.md",
    ROOT / "Makefile",
    *sorted(
        path
        for folder in ("stream", "tests", "benchmarks", "deploy", "helm")
        for path in (ROOT / folder).rglob("*")
        if path.suffix in {".py", ".md", ".sh", ".yaml", ".yml", ".tpl", ".txt"}
        and "node_modules" not in path.parts
    ),
]

# `stream/app/commit.py`, or `app/commit.py` as the README's prose says it (a package of
# stream/ first, so `tests/unit/app/x.py` and `docs/notes/x.md` do not match).
_PACKAGE = "|".join(PACKAGES)
PATH = re.compile(rf"(?<![\w./-])((?:stream/)?(?:{_PACKAGE})/\w+\.py)\b")
DOTTED = re.compile(r"(?<![\w./-])stream(?:\.[A-Za-z_]\w*)+")
NOTE = re.compile(r"(?<![\w-])notes/(\d{3})(-[\w.-]*\w)?")


def _helm_values() -> set[str]:
    """`stream.appId` and the like are the chart's values, not modules."""
    values = yaml.safe_load((ROOT / "helm/context-stream/values.yaml").read_text("utf-8"))
    return {f"stream.{key}" for key in values["stream"]}


def _module_exists(dotted: str) -> bool:
    """A module or package, or a name defined in one (`stream.config.Settings.from_env`)."""
    parts = dotted.split(".")
    for k in range(len(parts), 1, -1):
        base = ROOT.joinpath(*parts[:k])
        module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else None
        if module is None and (base / "__init__.py").is_file():
            module = base / "__init__.py"
        if module is None:
            continue
        if k == len(parts):
            return True
        # The rest names something in that module: its first part must be defined there.
        return parts[k] in _defined(module)
    return False


@functools.cache
def _defined(module: Path) -> frozenset[str]:
    """The names a module defines at its top level (assigned, def, class, imported)."""
    names: set[str] = set()
    for node in ast.parse(module.read_text("utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return frozenset(names)


def _path_exists(path: str) -> bool:
    return (ROOT / path if path.startswith("stream/") else STREAM / path).is_file()


def _note_exists(number: str, rest: str | None) -> bool:
    if rest is None:
        return any(NOTES.glob(f"{number}-*.md"))
    name = rest.removesuffix(".md")
    return (NOTES / f"{number}{name}.md").is_file()


def _comments_and_docstrings(path: Path) -> str:
    """What a module says in prose: its comments and docstrings, not its code."""
    source = path.read_text("utf-8")
    parts = [
        token.string
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            parts.append(ast.get_docstring(node) or "")
    return "\n".join(parts).replace("``", "`")


def stale_names(label: str, text: str, helm: set[str]) -> list[str]:
    """Every module path or dotted module in `text` that does not exist."""
    stale = [f"{label}: {m}" for m in PATH.findall(text) if not _path_exists(m)]
    for name in DOTTED.findall(text):
        if name not in helm and not _module_exists(name):
            stale.append(f"{label}: {name}")
    return stale


def test_the_readme_layout_is_the_one_drawn_from_the_docstrings() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    assert layout.render(readme) == readme, "run `make layout` (python -m tests.layout)"


def test_the_layout_names_every_package_and_every_app_module() -> None:
    drawn = layout.draw()
    names = {line.split()[0] for line in drawn.splitlines()[1:-1] if not line.startswith("   ")}
    names |= {line.split()[0] for line in drawn.splitlines() if re.match(r"    \w", line)}
    expected = {f"{p}/" for p in PACKAGES} | {"stream/"}
    expected |= {p.name for p in STREAM.glob("*.py") if not p.name.startswith("__")}
    expected |= {p.name for p in (STREAM / "app").glob("*.py") if not p.name.startswith("__")}
    expected |= {name for name, _ in layout.BESIDE}
    assert names == expected
    assert all((ROOT / name).is_dir() for name, _ in layout.BESIDE)


def test_a_summary_is_the_docstrings_first_sentence(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""Reads ``x.y``, e.g. the\nrows. Then more.\n\nAnd a paragraph."""\n')
    assert layout.summary(module) == "Reads `x.y`, e.g. the rows."
    module.write_text('"""What it holds, each part once:\n\n- one\n"""\n')
    assert layout.summary(module) == "What it holds, each part once."
    module.write_text("x = 1\n")
    with pytest.raises(ValueError, match="no docstring"):
        layout.summary(module)


def test_every_module_the_docs_name_exists() -> None:
    helm = _helm_values()
    stale = [
        name
        for doc in DOCS
        for name in stale_names(str(doc.relative_to(ROOT)), doc.read_text("utf-8"), helm)
    ]
    assert not stale


def test_every_module_the_code_names_in_prose_exists() -> None:
    stale = [
        name
        for module in sorted(STREAM.rglob("*.py"))
        if "_native" not in module.parts
        for name in stale_names(
            str(module.relative_to(ROOT)), _comments_and_docstrings(module), set()
        )
    ]
    assert not stale


def test_every_note_cited_exists() -> None:
    missing = [
        f"{path.relative_to(ROOT)}: notes/{number}{rest}"
        for path in CITING
        for number, rest in NOTE.findall(path.read_text("utf-8", errors="replace"))
        if not _note_exists(number, rest or None)
    ]
    assert not missing


def test_the_checks_catch_what_they_are_for() -> None:
    text = "see `stream/app/consumer.py`, `app/gone.py` and stream.app.service.TABLE_NAME"
    assert stale_names("t", text, set()) == [
        "t: stream/app/consumer.py",
        "t: app/gone.py",
        "t: stream.app.service.TABLE_NAME",
    ]
    assert stale_names("t", "`stream/app/commit.py`, stream.config.Settings", set()) == []
    assert not _note_exists("999", None)
    assert _note_exists("016", "-overload-without-collapse.md")
    assert not _note_exists("016", "-overload")


def test_performance_md_is_a_summary_not_a_diary() -> None:
    lines = (ROOT / "docs" / "performance.md").read_text("utf-8").count("\n")
    assert lines <= 600
