"""Differential test: `stream fold` must print what the published reference prints.

Generates ~300 nasty, reference-valid sessions (tests/generators/sessions.py), folds the
directory through our CLI (`python -m stream fold`) and through the pinned npm reference
(tests/oracle/fold.mjs), and compares the JSON lines one by one: every view equal after
every event, and faults on the same projections at the same seqs (messages may differ).

Knobs for exploring more inputs: ORACLE_SEED (first seed, default 0) and ORACLE_SESSIONS
(number of sessions, default 300).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.generators.sessions import Event, encode_json, generate_session, write_session_jsonl

pytestmark = pytest.mark.oracle

ORACLE_DIR = Path(__file__).resolve().parent
REPO_ROOT = ORACLE_DIR.parents[1]
FOLD_SCRIPT = ORACLE_DIR / "fold.mjs"
TOP_LEVEL_KEYS = ("sessionId", "seq", "contextPressure", "contextBreakdown", "tokenUsage")
VIEW_KEYS = ("contextPressure", "contextBreakdown", "tokenUsage")


@dataclass(frozen=True)
class Corpus:
    directory: Path
    sessions: dict[str, list[Event]]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    first = int(os.environ.get("ORACLE_SEED", "0"))
    count = int(os.environ.get("ORACLE_SESSIONS", "300"))
    directory = tmp_path_factory.mktemp("sessions")
    sessions: dict[str, list[Event]] = {}
    for seed in range(first, first + count):
        rng = random.Random(seed)
        session_id = f"s{seed:06d}"
        if seed % 13 == 4:
            # Header ids are free text: the output must carry them verbatim.
            session_id += '/é😀\u2028"\\'
        # Mostly mid-sized logs, some tiny and some long.
        n_events = rng.choice(
            (rng.randrange(20, 60), rng.randrange(20, 401), rng.randrange(300, 401))
        )
        events = generate_session(rng, session_id, n_events, v3_ops=seed % 5 == 0)
        sessions[session_id] = events
        write_session_jsonl(
            directory / f"s{seed:06d}.jsonl",
            session_id,
            events,
            pack_chunks=seed % 10 != 3,
            header=seed % 29 != 7 or seed % 13 == 4,  # header-less: id from the file name
        )
    return Corpus(directory, sessions)


def _run(command: list[str]) -> list[str]:
    proc = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, check=False)
    if proc.returncode != 0:
        stderr = proc.stderr.decode("utf-8", "replace")[-4000:]
        pytest.fail(f"{' '.join(command)} exited {proc.returncode}\n{stderr}", pytrace=False)
    # Split on "\n" only: str.splitlines would also split on U+2028 and friends.
    return proc.stdout.decode("utf-8").split("\n")[:-1]


def _strict_equal(a: Any, b: Any) -> bool:
    """JSON equality that also tells 1 from 1.0 and True from 1."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_strict_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _fault_seqs(line: dict[str, Any]) -> dict[str, Any]:
    faults = line.get("faults", {})
    if not isinstance(faults, dict):
        return {"<faults is not an object>": faults}
    return {
        key: fault.get("seq") if isinstance(fault, dict) else fault for key, fault in faults.items()
    }


def _difference(
    ours: dict[str, Any], ref: dict[str, Any], times: set[int] | None = None
) -> str | None:
    # `time` (the session's latest event time) is ours, not the reference's: it comes
    # after `seq` and must be one of the session's own integer event times.
    keys = [k for k in ours if k != "time"]
    misplaced = "time" in ours and list(ours)[2] != "time"
    if misplaced or ("time" in ours and times is not None and ours["time"] not in times):
        return f"time {ours['time']!r} is not the session's own, after seq"
    expected_keys = [*TOP_LEVEL_KEYS, *(("faults",) if "faults" in ref else ())]
    if keys != expected_keys:
        return f"top-level keys {keys} != {expected_keys}"
    for key in ("sessionId", "seq", *VIEW_KEYS):
        if not _strict_equal(ours[key], ref[key]):
            return f"{key} differs"
    if _fault_seqs(ours) != _fault_seqs(ref):
        return "faults differ (projection or seq)"
    return None


def _event_text(corpus: Corpus, session_id: Any, seq: Any) -> str:
    events = corpus.sessions.get(str(session_id))
    if events is None or not isinstance(seq, int) or not 0 <= seq < len(events):
        return "<event not found>"
    return encode_json(events[seq])


def _compare(corpus: Corpus, ours: list[str], ref: list[str]) -> None:
    for index, ref_line in enumerate(ref):
        ref_value = json.loads(ref_line)
        where = f"session {ref_value['sessionId']} seq {ref_value['seq']} (output line {index + 1})"
        event = _event_text(corpus, ref_value["sessionId"], ref_value["seq"])
        if index >= len(ours):
            pytest.fail(
                f"our output ends early at {where}\n  reference: {ref_line}\n  event: {event}",
                pytrace=False,
            )
        try:
            our_value = json.loads(ours[index])
        except json.JSONDecodeError as error:
            pytest.fail(f"our line is not JSON at {where}: {error}\n  ours: {ours[index]}")
        events = corpus.sessions.get(str(ref_value["sessionId"])) or []
        times = {e["time"] for e in events if isinstance(e, dict) and type(e.get("time")) is int}
        problem = (
            _difference(our_value, ref_value, times)
            if isinstance(our_value, dict)
            else "our line is not an object"
        )
        if problem is not None:
            pytest.fail(
                f"{problem} at {where}\n"
                f"  ours:      {ours[index]}\n"
                f"  reference: {ref_line}\n"
                f"  event:     {event}",
                pytrace=False,
            )
    if len(ours) > len(ref):
        pytest.fail(f"our output has {len(ours) - len(ref)} extra lines, first: {ours[len(ref)]}")


def test_every_event_matches_reference(node: str, corpus: Corpus) -> None:
    ref = _run([node, str(FOLD_SCRIPT), "--every-event", str(corpus.directory)])
    assert len(ref) == sum(len(events) for events in corpus.sessions.values())
    ours = _run([sys.executable, "-m", "stream", "fold", "--every-event", str(corpus.directory)])
    _compare(corpus, ours, ref)


def test_final_lines_match_reference(node: str, corpus: Corpus) -> None:
    ref = _run([node, str(FOLD_SCRIPT), str(corpus.directory)])
    assert len(ref) == len(corpus.sessions)
    ours = _run([sys.executable, "-m", "stream", "fold", str(corpus.directory)])
    _compare(corpus, ours, ref)
