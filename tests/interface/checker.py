"""Runs check.mjs (the AsyncAPI and OpenAPI parsers, Ajv) from Python tests: the documents in
docs/api/ parse, and observed messages validate against their schemas."""

import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "check.mjs"
INSTALLED = HERE / "node_modules" / "@asyncapi" / "parser" / "package.json"


@dataclass(frozen=True)
class Report:
    returncode: int
    problems: list[str]  # the documents' own: parse errors and warnings
    matched: dict[str, int]  # what each observation matched ("channel/message", ...), counted
    failures: list[dict[str, Any]]  # observations that matched nothing: what, errors
    stderr: str

    @property
    def clean(self) -> bool:
        return self.returncode == 0 and not self.problems and not self.failures


def check(observations: list[dict[str, Any]] | None = None) -> Report:
    """Parses the documents and validates ``observations`` (check.mjs's header says their
    shapes). Installs the Node project on first use (``make setup`` normally has)."""
    node = shutil.which("node")
    assert node is not None, "node is required (Node 20: README, 'Two commands')"
    if not INSTALLED.is_file():
        npm = shutil.which("npm")
        assert npm is not None, "npm is required to install tests/interface"
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HERE, check=True
        )
    with tempfile.TemporaryDirectory() as tmp:
        args = [node, str(SCRIPT)]
        if observations is not None:
            path = Path(tmp) / "observed.json"
            path.write_text(json.dumps(observations))
            args.append(str(path))
        done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        report = {"problems": [f"check.mjs printed no report: {done.stdout[-2000:]}"]}
    return Report(
        done.returncode,
        report.get("problems", []),
        report.get("matched", {}),
        report.get("failures", []),
        done.stderr,
    )
