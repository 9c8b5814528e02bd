"""The event factory (``stream.testing.events``): the shapes the contract reads.

The worked examples of docs/contract.md (``docs/examples/``) are rebuilt line for line,
byte for byte, so the factory writes what the contract documents; every builder reads
back through ``read_event`` / ``storage.expand`` as the event it names.
"""

from pathlib import Path
from typing import Any

import orjson
import pytest

from stream.contract import data
from stream.contract.errors import ContractError
from stream.contract.events import APPEND, Replace, read_event
from stream.contract.storage import ChunkRun, decode_line, expand, session_id_of
from stream.testing import events as build
from stream.testing.events import ABSENT

EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "examples"
T = 1_767_225_600_000  # the examples' first event time


def at(seq: int) -> int:
    return T + 1000 * seq


def bash_call() -> dict[str, Any]:
    return build.tool_call_block("c1", "bash", '{"a":1}')


def bash_result(seq: int) -> dict[str, Any]:
    block = build.tool_result_block("c1", build.texts("hello world\n"), name="bash")
    return build.tool_result(seq, [block], time=at(seq))


HEADER = {"system": "You are terse.", "tools": [{"name": "bash"}]}

DOCUMENTED: dict[str, list[dict[str, Any]]] = {
    "compaction": [
        build.request_header(0, **HEADER, time=at(0)),
        build.request_context(1, 128000, time=at(1)),
        build.user_message(2, build.texts("abcd"), time=at(2)),
        build.assistant_message(
            3, [bash_call()], turn=0, step=0, usage=build.usage(100, 7, cache_read=20), time=at(3)
        ),
        bash_result(4),
        build.assistant_message(
            5,
            build.texts("Done."),
            turn=0,
            step=1,
            usage=build.usage(30, 2, cache_read=100),
            time=at(5),
        ),
        build.metering(6, 2, 4, 35, shadowed_seqs=[2, 3, 4], time=at(6)),
        build.user_message(
            7,
            build.texts("[summary] ran bash"),
            source="compaction",
            op=build.replace(2, 4, v3=True),
            time=at(7),
        ),
    ],
    "duplicate": [
        build.user_message(0, build.texts("abcd"), time=at(0)),
        build.event("turn/start", 1, {"turn": 0}, time=at(1)),
        build.user_message(2, build.texts("abcdefgh"), time=at(2)),
        build.event("turn/start", 1, {"turn": 0}, time=at(1)),
    ],
    "faults": [
        build.user_message(0, build.texts("abcd"), time=at(0)),
        build.metering(1, 0, 0, 9, shadowed_seqs=[0], type="compaction/prune", time=at(1)),
        build.user_message(
            2, build.texts("pruned"), source="compaction", op=build.replace(0, 1), time=at(2)
        ),
        build.usage_chunk(3, build.usage(40, 1), time=at(3)),
        build.usage_chunk(5, build.usage(60, 2), step=1, time=at(5)),
    ],
    "system-prompts": [
        build.request_header(0, system="You are terse.", time=at(0)),
        build.system_message(1, build.texts("You are a careful agent."), time=at(1)),
        build.user_message(2, build.texts("abcd"), time=at(2)),
        build.system_message(
            3,
            build.texts("You are a careful agent. Cite paths."),
            op=build.replace(1, 1, v3=True),
            time=at(3),
        ),
        build.system_message(4, build.texts(""), time=at(4)),
        build.metering(5, 3, 4, 22, shadowed_seqs=[3, 2, 4], time=at(5)),
        build.user_message(
            6, build.texts("summary"), source="compaction", op=build.replace(3, 4), time=at(6)
        ),
    ],
    "unmetered": [
        build.request_header(0, **HEADER, time=at(0)),
        build.user_message(1, build.texts("abcd"), time=at(1)),
        build.assistant_message(
            2, [bash_call()], turn=0, step=0, usage=build.usage(100, 7), time=at(2)
        ),
        bash_result(3),
        build.user_message(
            4,
            build.texts("[summary] ran bash"),
            source="compaction",
            op=build.replace(1, 3),
            time=at(4),
        ),
    ],
    "usage": [
        build.event("turn/start", 0, {"turn": 0}, time=at(0)),
        build.usage_chunk(1, build.usage(100, 5, cache_write=50), time=at(1)),
        build.assistant_message(
            2,
            build.texts("abcd"),
            turn=0,
            step=0,
            usage=build.usage(100, 12, cache_write=50),
            time=at(2),
        ),
        build.usage_chunk(3, build.usage(100, 12, cache_write=50), time=at(3)),
        build.assistant_message(
            4,
            [],
            turn=0,
            step=1,
            usage=build.usage(20, 3, cache_read=150, reasoning=2),
            time=at(4),
        ),
    ],
}


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_the_documented_examples_are_rebuilt_byte_for_byte(name: str) -> None:
    lines = [build.session_header(name), *DOCUMENTED[name]]
    built = b"".join(orjson.dumps(line) + b"\n" for line in lines)
    assert built == (EXAMPLES / f"{name}.jsonl").read_bytes()


def test_every_example_is_covered() -> None:
    assert {p.stem for p in EXAMPLES.glob("*.jsonl")} == set(DOCUMENTED)


# --- each builder reads back as the event it names ----------------------------------------------


def test_surface_events_read_back_with_their_ops() -> None:
    cases = [
        build.user_message(0, build.texts("a")),
        build.assistant_message(1, build.texts("b")),
        build.tool_result(2, [build.tool_result_block("c", build.texts("c"))]),
        build.system_message(3, build.texts("d")),
    ]
    for raw in cases:
        event = read_event(raw)
        assert (event.error, event.surface_error, event.op) == (None, None, APPEND)
        assert data.surface_message(event) is not None
    replaced = read_event(build.user_message(4, [], op=build.replace(0, 3, v3=True)))
    assert replaced.op == Replace(0, 3)
    assert read_event(build.user_message(4, [], op=build.replace(0, 3))).op == Replace(0, 3)


def test_reading_events_read_back_through_their_data_readers() -> None:
    header = read_event(build.request_header(0, system="s", tools=[{"name": "t"}]))
    assert data.envelope(header) == ("s", [{"name": "t"}])
    assert data.envelope(read_event(build.request_header(0))) == (None, None)
    assert data.context_window(read_event(build.request_context(1, 4096))) == 4096
    assert data.context_window(read_event(build.request_context(1))) is None
    sample = data.usage_sample(read_event(build.usage_chunk(2, build.usage(5, 6), turn=1)))
    assert sample is not None and sample.turn == 1 and sample.step == 0
    assert sample.usage.uncached_input == 5 and sample.usage.output == 6
    meter = read_event(build.metering(3, 1, 2, 7, shadowed_seqs=[1, 2], type="compaction/prune"))
    assert data.metering(meter) == (1, 2, 7)
    assert data.shadowed_seqs(meter) == frozenset({1, 2})
    assert read_event(build.assistant_chunk(4, build.text_delta("x"))).passive


def test_absent_leaves_a_key_out_and_none_writes_null() -> None:
    assert "contextWindow" not in build.context_data()
    assert build.context_data(None) == {"contextWindow": None}
    assert build.usage(1, 2, cache_read=None) == {
        "inputTokens": 1,
        "outputTokens": 2,
        "cacheReadTokens": None,
    }
    assert "surfaceOp" not in build.event("turn/start", 0, {})
    assert "time" not in build.event("turn/start", 0, {}, time=ABSENT)
    assert "data" not in build.event("turn/start", 0)
    assert build.assistant_data([]) == {"message": {"role": "assistant", "content": []}}
    assert "source" not in build.user_data([], source=ABSENT)
    assert repr(ABSENT) == "ABSENT"


def test_malformed_values_are_written_as_given() -> None:
    # The factory never validates: the tests of "Validation" build their input here.
    event = read_event(build.request_context(0, 0))
    with pytest.raises(ContractError, match="contextWindow must be a positive integer"):
        data.context_window(event)
    assert read_event(build.event("x", 0, [], time="soon")).error is not None
    assert read_event(build.user_message(0, [], op={"op": "replace"})).surface_error is not None


def test_builders_return_fresh_objects() -> None:
    first = build.request_header(0)
    first["data"]["header"]["config"]["model"] = "changed"
    assert build.request_header(0)["data"]["header"]["config"] == {"model": "deepseek-chat"}


def test_extra_keys_are_kept() -> None:
    raw = build.event("turn/start", 0, {}, sourceEventSeqs=[1], ignorable=True)
    assert raw["sourceEventSeqs"] == [1] and raw["ignorable"] is True


# --- session logs -------------------------------------------------------------------------------


def test_the_session_header_names_the_session() -> None:
    assert session_id_of(build.session_header("s-1")) == "s-1"


@pytest.mark.parametrize(
    "row",
    [
        build.chunk_row("text-chunks", 10, 1000, ["Hel", "lo", "😀"], turn=1, step=2, dt=[5, -3]),
        build.chunk_row("reasoning-chunks", 0, 7, ["think"], index=1),
        build.chunk_row(
            "tool-call-chunks", 4, 50, ['{"a"', ":1}"], step=1, index=2, call_id="c", name="bash"
        ),
        build.chunk_row("tool-call-chunks", 4, 50, ["x", ""], call_id="c"),
    ],
    ids=["text", "reasoning", "tool-call", "tool-call-unnamed"],
)
def test_chunk_rows_are_valid_and_pack_run_inverts_expand(row: dict[str, Any]) -> None:
    decoded = decode_line(row)
    assert isinstance(decoded, ChunkRun)
    members = row["data"].get("texts") or row["data"]["args"]
    assert (decoded.seq0, decoded.size) == (row["seq0"], len(members))
    events = expand(row)
    assert [e["seq"] for e in events] == list(range(row["seq0"], row["seq0"] + len(members)))
    assert build.pack_run(events) == row


def test_chunk_row_gaps_default_to_zero() -> None:
    row = build.chunk_row("text-chunks", 0, 9, ["a", "b", "c"])
    assert row["data"]["dt"] == [0, 0]
    assert [e["time"] for e in expand(row)] == [9, 9, 9]


def test_pack_run_refuses_what_is_not_a_run_of_deltas() -> None:
    with pytest.raises(ValueError, match="empty run"):
        build.pack_run([])
    with pytest.raises(ValueError, match="not a delta chunk"):
        build.pack_run([build.usage_chunk(0, build.usage(1, 1))])
