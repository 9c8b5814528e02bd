"""The README's layout section, drawn from the modules' docstrings: ``make layout``.

Each package under ``stream/`` is described by the first sentence of its ``__init__``
docstring, each top-level module and each module of the packages in ``EXPANDED`` by the
first sentence of its own, so the section says what the code says and names exactly
what exists. ``python -m tests.layout`` rewrites the block between the two markers in
README.md; ``tests/unit/test_docs.py`` fails while the README differs from what it would
write. To change a line, change the docstring and run ``make layout``.
"""

import ast
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BEGIN = "<!-- layout: `make layout` draws this block from the modules' docstrings -->"
END = "<!-- /layout -->"
WIDTH = 100
# The worker's edge, which issue 53 asks a newcomer to be able to own, module by module;
# the other packages are one line each (their modules' roles are their own docstrings).
EXPANDED = ("app",)
# What lies beside stream/: no docstring to draw from, so stated here (and checked to exist).
BESIDE = (
    ("deploy/", "local Kafka (Maven-assembled, KRaft) and Redis scripts, the demo, Dockerfile"),
    ("helm/", "the Helm chart"),
    ("benchmarks/", "corpus generator, fold, end-to-end, re-seed and replay benchmarks"),
    ("docs/", "the contract, operator guides, performance, design notes (notes/)"),
    (
        "tests/",
        "unit/ (mirrors stream/), oracle/ (reference, Node), integration/ (real Kafka + Redis"
        " + Chromium), deploy/, interface/, generators/; layout.py draws this block",
    ),
)
# A sentence ends at a full stop followed by a space and a capital, a backquote or an
# opening parenthesis (not "e.g. the", not a dotted name inside backquotes).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(])")


def summary(path: Path) -> str:
    """The first sentence of a module's docstring, in the README's single backquotes."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    if not doc:
        raise ValueError(f"{path} has no docstring to describe it by")
    paragraph = " ".join(doc.split("\n\n", 1)[0].split())
    sentence = _SENTENCE_END.split(paragraph, maxsplit=1)[0]
    if sentence.endswith(":"):  # a paragraph that opens a list: its lead-in is the summary
        sentence = sentence[:-1] + "."
    return sentence.replace("``", "`")


def _column(indent: int, entries: list[tuple[str, str]]) -> int:
    return indent + max(len(name) for name, _ in entries) + 2


def _rows(indent: int, column: int, entries: list[tuple[str, str]]) -> list[str]:
    """Names at an indent, descriptions wrapped in one column from `column` on."""
    lines: list[str] = []
    for name, text in entries:
        wrapped = textwrap.wrap(text, width=WIDTH - column, break_on_hyphens=False)
        lines.append(" " * indent + name.ljust(column - indent) + wrapped[0])
        lines += [" " * column + more for more in wrapped[1:]]
    return lines


def draw(root: Path = ROOT) -> str:
    """The layout block: stream/'s packages, its modules and EXPANDED's, then the rest."""
    stream = root / "stream"
    packages = sorted(
        p for p in stream.iterdir() if (p / "__init__.py").is_file() and p.name[0] != "_"
    )
    modules = sorted(p for p in stream.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    top = [(p.name + "/", summary(p / "__init__.py")) for p in packages]
    top += [(p.name, summary(p)) for p in modules]
    inner = {
        package.name: [
            (p.name, summary(p))
            for p in sorted(package.glob("*.py"))
            if p.name not in ("__init__.py", "__main__.py")
        ]
        for package in packages
        if package.name in EXPANDED
    }
    column = max([_column(2, top), *(_column(4, rows) for rows in inner.values())])
    lines = _rows(0, column, [("stream/", summary(stream / "__init__.py"))])
    for entry in top:
        lines += _rows(2, column, [entry])
        lines += _rows(4, column, inner.get(entry[0].rstrip("/"), []))
    lines += _rows(0, _column(0, list(BESIDE)), list(BESIDE))
    return "\n".join(["```", *lines, "```"])


def render(readme: str, root: Path = ROOT) -> str:
    """The README with its layout block redrawn (the markers must be there, once each)."""
    head, begin, rest = readme.partition(BEGIN + "\n")
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"README.md lacks the layout markers {BEGIN!r} ... {END!r}")
    return head + begin + draw(root) + "\n" + end + tail


def main() -> int:
    text = README.read_text(encoding="utf-8")
    drawn = render(text)
    if drawn != text:
        README.write_text(drawn, encoding="utf-8")
        print("README.md: layout redrawn")
    else:
        print("README.md: layout already current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
