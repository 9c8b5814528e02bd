"""The benchmark's corpus shapes (benchmarks.corpus.shapes) through both folds, event by event.

`benchmarks.fold` compares our speed with the reference's on these shapes and checks only
the last line per session; this checks that every event of every shape (small corpora of
each, packed and unpacked) folds to exactly what the reference prints: the views after
each event equal, strictly typed, and no faults on either side (the shapes are valid logs).

One difference is the contract's, not a bug: in a modern log the system prompt is a
``system/message`` at seq 0, before the first ``request/header``. Our contextBreakdown
shows a retained prompt as ``systemTokens`` from then on (docs/contract.md,
"contextBreakdown"; note 007); the pinned reference takes ``systemTokens`` from request
envelopes only, so it shows 0 until the first one. Until a session's first
``request/header``, ``systemTokens`` is left out of the comparison; from it on (the same
prompt, the same price) every figure must match.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from benchmarks.corpus import shapes, write_shape
from stream.contract.storage import expand

pytestmark = pytest.mark.oracle

ORACLE_DIR = Path(__file__).resolve().parent
REPO_ROOT = ORACLE_DIR.parents[1]
FOLD_SCRIPT = ORACLE_DIR / "fold.mjs"
MEGABYTES = 0.3  # per shape: one or more sessions of each, seconds for both folds


def _unpacked(packed: Path, out: Path) -> None:
    """The same logs with every packed chunk row as one line per event."""
    for path in sorted(packed.rglob("*.jsonl")):
        target = out / path.relative_to(packed)
        target.parent.mkdir(parents=True, exist_ok=True)
        lines = [
            orjson.dumps(value)
            for line in path.read_bytes().splitlines()
            if line.strip()
            for value in expand(orjson.loads(line))
        ]
        target.write_bytes(b"\n".join(lines) + b"\n")


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("shapes")
    packed, unpacked = root / "packed", root / "unpacked"
    for index, shape in enumerate(shapes()):
        # A seed per shape: file names (the session ids of legacy logs) never collide.
        write_shape(packed / shape.name.replace("/", "-"), shape, MEGABYTES, 100 + index)
    _unpacked(packed, unpacked)
    return {"packed": packed, "unpacked": unpacked}


def _lines(command: list[str]) -> list[bytes]:
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(command)} exited {done.returncode}\n{done.stderr[-4000:]!r}")
    return done.stdout.split(b"\n")[:-1]


def _first_headers(directory: Path) -> dict[str, int]:
    """Each session's first ``request/header`` seq (an unpacked log: one line per event)."""
    first: dict[str, int] = {}
    for path in sorted(directory.rglob("*.jsonl")):
        session = path.name.removesuffix(".jsonl")
        for line in path.read_bytes().splitlines():
            value = orjson.loads(line)
            if value.get("type") == "session":
                session = value["id"]
            elif value.get("type") == "request/header":
                first[session] = value["seq"]
                break
    return first


def _canonical(line: bytes, ours: bool, first_headers: dict[str, int]) -> bytes:
    value: dict[str, Any] = orjson.loads(line)
    if ours:
        value.pop("time", None)  # ours only: the session's latest event time
    if value["seq"] < first_headers.get(value["sessionId"], 0):
        del value["contextBreakdown"]["systemTokens"]  # see the module's docstring
    # Sorted keys, orjson's number text: 1 and 1.0, true and 1 stay different.
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


@pytest.mark.parametrize("layout", ["packed", "unpacked"])
def test_every_shape_folds_as_the_reference_event_by_event(
    node: str, corpora: dict[str, Path], layout: str
) -> None:
    # A directory per shape (the reference reads a directory's logs, not its subdirectories).
    directories = sorted(str(path) for path in corpora[layout].iterdir())
    ref = _lines([node, str(FOLD_SCRIPT), "--every-event", *directories])
    ours = _lines([sys.executable, "-m", "stream", "fold", "--every-event", *directories])
    first_headers = _first_headers(corpora["unpacked"])
    sessions = {orjson.loads(line)["sessionId"] for line in ref}
    assert len(sessions) > len(shapes())  # every shape, more than one session of some
    assert len(ours) == len(ref)
    for index, (mine, theirs) in enumerate(zip(ours, ref, strict=True)):
        assert b'"faults"' not in theirs, f"the reference faults at line {index + 1}: {theirs!r}"
        assert _canonical(mine, True, first_headers) == _canonical(theirs, False, first_headers), (
            f"line {index + 1}:\n  ours:      {mine!r}\n  reference: {theirs!r}"
        )
