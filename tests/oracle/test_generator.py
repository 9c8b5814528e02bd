"""Self-checks of the oracle tooling, independent of our `stream` package.

- fold.mjs prices hand-written nasty lines exactly as the contract says ("Pricing");
- generated logs are valid for the reference (dsh-session's surface fold, envelope and
  type vocabulary) and fault only where a claim mismatch was planted;
- chunk packing is lossless as the reference decodes it;
- the generator is deterministic.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.generators.sessions import encode_json, generate_session, write_session_jsonl

pytestmark = pytest.mark.oracle

ORACLE_DIR = Path(__file__).resolve().parent


def _node_lines(node: str, script: str, *args: str) -> list[dict[str, Any]]:
    proc = subprocess.run([node, str(ORACLE_DIR / script), *args], capture_output=True, check=True)
    return [json.loads(line) for line in proc.stdout.decode("utf-8").split("\n")[:-1]]


def _write_corpus(directory: Path, seeds: range, *, pack_chunks: bool) -> None:
    for seed in seeds:
        rng = random.Random(seed)
        events = generate_session(rng, f"g{seed}", rng.randrange(20, 401))
        write_session_jsonl(directory / f"g{seed}.jsonl", f"g{seed}", events, pack_chunks)


def _ceil4(n: int) -> int:
    return math.ceil(n / 4)


# Hand-written so the check does not depend on the generator's writer. Python string
# escapes below produce the JSON escapes on disk (e.g. "\\ud800" -> \ud800).
_HAND_LINES = [
    '{"type":"session","id":"hand"}',
    '{"type":"request/header","seq":0,"time":1,"data":{"header":{"config":{"model":"m"},'
    '"system":"You are terse.","tools":[{"x":1e21}]}}}',
    '{"type":"request/header","seq":1,"time":2,"data":{"header":{"config":{"model":"m"},'
    '"system":"","tools":[]}}}',
    '{"type":"request/header","seq":2,"time":3,"data":{"header":{"config":{"model":"m"},'
    '"tools":[{"n":-0,"a":1.0,"b":1E+2,"c":12345678901234567891,"d":1e-7,'
    '"s":"\\ud800\\ud83d\\ude00\\u001f","i":1e400}]}}}',
    '{"type":"user/message","seq":3,"time":4,"data":{"role":"user",'
    '"content":[{"type":"text","text":"abcd"}],"source":"user"},"surfaceOp":"append"}',
    '{"type":"user/message","seq":4,"time":5,"data":{"role":"user",'
    '"content":[{"type":"text","text":"\\ud800"}],"source":"user"},"surfaceOp":"append"}',
    '{"type":"user/message","seq":5,"time":6,"data":{"role":"user",'
    '"content":[{"type":"text","text":"\\ud83d\\ude00"}],"source":"user"},"surfaceOp":"append"}',
    '{"type":"user/message","seq":6,"time":7,"data":{"role":"user",'
    '"content":[{"type":"text","text":"😀😀😀"}],"source":"user"},"surfaceOp":"append"}',
    '{"type":"assistant/message","seq":7,"time":8,"data":{"turn":0,"step":0,"message":'
    '{"role":"assistant","content":[{"type":"tool-call","id":"c1","name":"bash",'
    '"arguments":"{\\"a\\":1}"}]}},"surfaceOp":"append"}',
    '{"type":"user/message","seq":8,"time":9,"data":{"role":"user",'
    '"content":[{"type":"image","n":1e21}],"source":"user"},"surfaceOp":"append"}',
]


def test_fold_script_prices_spec_examples(node: str, tmp_path: Path) -> None:
    path = tmp_path / "hand.jsonl"
    path.write_text("\n".join(_HAND_LINES) + "\n", encoding="utf-8")
    lines = _node_lines(node, "fold.mjs", "--every-event", str(path))
    breakdown = [line["contextBreakdown"] for line in lines]
    # system "You are terse." -> 8; tools JSON [{"x":1e+21}] (13 chars) -> 4 + 4.
    assert breakdown[0] == {"systemTokens": 8, "toolsTokens": 8, "messageTokens": 0}
    # empty system and empty tools are canonically absent -> 0.
    assert breakdown[1] == {"systemTokens": 0, "toolsTokens": 0, "messageTokens": 0}
    # -0 -> 0, 1.0 -> 1, 1E+2 -> 100, >2^53 loses precision, 1e-7 stays, a lone
    # surrogate prints escaped (6), the emoji raw (2 code units), 1e400 -> null.
    tools_json = (
        '[{"n":0,"a":1,"b":100,"c":12345678901234567000,"d":1e-7,'
        '"s":"\\ud800' + "😀" + '\\u001f","i":null}]'
    )
    tools_len = len(tools_json.encode("utf-16-le")) // 2
    assert breakdown[2]["toolsTokens"] == _ceil4(tools_len) + 4
    # user "abcd" -> 9; lone surrogate: 1 unit -> 9; one emoji: 2 units -> 9;
    # three emoji: 6 units -> 10; tool-call bash {"a":1}: 7 + 4 -> 11;
    # unknown block {"type":"image","n":1e+21} (26 chars) -> 7 + 4 + 4 -> 15.
    running = [9, 18, 27, 37, 48, 63]
    assert [b["messageTokens"] for b in breakdown[3:]] == running
    assert [line["seq"] for line in lines] == list(range(9))
    assert all(line["sessionId"] == "hand" and "faults" not in line for line in lines)


def test_generated_logs_are_reference_valid(node: str, tmp_path: Path) -> None:
    _write_corpus(tmp_path, range(1000, 1080), pack_chunks=True)
    results = _node_lines(node, "validate.mjs", str(tmp_path))
    assert len(results) == 80
    for result in results:
        assert "error" not in result, result
        faults = result["faults"]
        # The only planted fault: a claim over one range, a replace over another. It
        # hits both surface projections at the same event; tokenUsage never faults.
        assert set(faults) in (set(), {"contextPressure", "contextBreakdown"}), result
        for fault in faults.values():
            assert "has no adjacent shadow price" in fault["error"]
        if faults:
            assert faults["contextPressure"]["seq"] == faults["contextBreakdown"]["seq"]


def test_chunk_packing_is_lossless(node: str, tmp_path: Path) -> None:
    packed, plain = tmp_path / "packed", tmp_path / "plain"
    packed.mkdir()
    plain.mkdir()
    _write_corpus(packed, range(2000, 2040), pack_chunks=True)
    _write_corpus(plain, range(2000, 2040), pack_chunks=False)
    tags = {
        json.loads(line)["type"]
        for path in packed.iterdir()
        for line in path.read_text(encoding="utf-8").split("\n")[:-1]
    }
    assert {"text-chunks", "reasoning-chunks", "tool-call-chunks"} <= tags
    digests = {
        r["file"]: (r["events"], r["digest"]) for r in _node_lines(node, "validate.mjs", str(plain))
    }
    for result in _node_lines(node, "validate.mjs", str(packed)):
        assert "error" not in result, result
        assert digests[result["file"]] == (result["events"], result["digest"]), result["file"]


def test_python_json_reads_every_line(tmp_path: Path) -> None:
    _write_corpus(tmp_path, range(3000, 3020), pack_chunks=True)
    for path in tmp_path.iterdir():
        for line in path.read_bytes().decode("utf-8").split("\n")[:-1]:
            assert isinstance(json.loads(line), dict)


def test_generator_is_deterministic(tmp_path: Path) -> None:
    first = generate_session(random.Random(7), "d", 300)
    again = generate_session(random.Random(7), "d", 300)
    assert [encode_json(e) for e in first] == [encode_json(e) for e in again]
    assert [e["seq"] for e in first] == list(range(300))
    assert all(isinstance(e["time"], int) for e in first)
    write_session_jsonl(tmp_path / "a.jsonl", "d", first)
    write_session_jsonl(tmp_path / "b.jsonl", "d", again)
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
