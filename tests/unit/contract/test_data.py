"""Per-type data readers: each validates exactly what it returns.

Contract: "Events", "Validation".
"""

from typing import Any

import pytest

from stream.contract.data import (
    Metering,
    Usage,
    context_window,
    envelope,
    metering,
    shadowed_seqs,
    surface_message,
    usage_sample,
)
from stream.contract.errors import ContractError

from ..builders import assistant, context, ev, header, meter, usage, usage_chunk

# --- usage ------------------------------------------------------------------------------------


def test_usage_chunk_is_a_sample() -> None:
    sample = usage_sample(usage_chunk(3, usage(10, 2, 3, 4), turn=1, step=2))
    assert sample is not None
    assert (sample.turn, sample.step) == (1, 2)
    assert sample.usage == Usage(10, 2, 3, 4)
    assert sample.usage.pressure == 10 + 3 + 4  # input plus cache traffic, no output


def test_assistant_message_usage_is_a_sample() -> None:
    sample = usage_sample(assistant(3, "hi", usage=usage(7, 1), turn=0, step=1))
    assert sample is not None
    assert sample.usage == Usage(7, 1, 0, 0)
    assert (sample.turn, sample.step) == (0, 1)


@pytest.mark.parametrize(
    "event",
    [
        assistant(3, "hi"),  # no usage
        ev("assistant/chunk", 3, {"turn": 0, "step": 0, "chunk": {"type": "text-delta"}}),
        ev("user/message", 3, {"content": [], "usage": {"inputTokens": 1}}, "append"),
        ev("turn/start", 3, {"usage": usage(1, 1)}),
    ],
)
def test_no_sample(event: Any) -> None:
    assert usage_sample(event) is None


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"inputTokens": 5, "outputTokens": 6}, Usage(5, 6, 0, 0)),
        ({"inputTokens": 5, "outputTokens": 6, "cacheReadTokens": None}, Usage(5, 6, 0, 0)),
        (
            {"inputTokens": 5, "outputTokens": 6, "cacheReadTokens": 7, "cacheWriteTokens": 8},
            Usage(5, 6, 7, 8),
        ),
        ({"inputTokens": 5.0, "outputTokens": 0, "reasoningTokens": 3}, Usage(5, 0, 0, 0)),
    ],
)
def test_usage_fields(fields: dict[str, Any], expected: Usage) -> None:
    sample = usage_sample(usage_chunk(0, fields))
    assert sample is not None
    assert sample.usage == expected


BAD_USAGES = [
    None,  # usage null
    [],
    "100",
    5,
    {},
    {"inputTokens": 1},  # outputTokens required
    {"outputTokens": 1},
    {"inputTokens": -1, "outputTokens": 0},
    {"inputTokens": 1.5, "outputTokens": 0},
    {"inputTokens": True, "outputTokens": 0},
    {"inputTokens": "1", "outputTokens": 0},
    {"inputTokens": 1, "outputTokens": 0, "cacheReadTokens": -3},
    {"inputTokens": 1, "outputTokens": 0, "cacheWriteTokens": 0.5},
    {"inputTokens": 1, "outputTokens": 0, "cacheWriteTokens": False},
    {"inputTokens": 1, "outputTokens": 0, "reasoningTokens": -1},
    {"inputTokens": 2**53, "outputTokens": 0},
]


@pytest.mark.parametrize("bad", BAD_USAGES)
def test_malformed_usage_chunk(bad: Any) -> None:
    with pytest.raises(ContractError, match="assistant/chunk at seq 4"):
        usage_sample(usage_chunk(4, bad))


@pytest.mark.parametrize("bad", BAD_USAGES)
def test_malformed_assistant_message_usage(bad: Any) -> None:
    with pytest.raises(ContractError, match="assistant/message at seq 4"):
        usage_sample(assistant(4, "x", usage=bad))


@pytest.mark.parametrize("chunk", [None, "usage", [], 5])
def test_chunk_not_an_object(chunk: Any) -> None:
    with pytest.raises(ContractError, match="chunk"):
        usage_sample(ev("assistant/chunk", 1, {"turn": 0, "step": 0, "chunk": chunk}))


@pytest.mark.parametrize("turn", [-1, 1.5, "0", True])
def test_malformed_turn_or_step(turn: Any) -> None:
    with pytest.raises(ContractError):
        usage_sample(
            ev(
                "assistant/chunk",
                1,
                {"turn": turn, "step": 0, "chunk": {"type": "usage", "usage": usage(1)}},
            )
        )


# --- request/context --------------------------------------------------------------------------


@pytest.mark.parametrize(("window", "expected"), [(1, 1), (128_000, 128_000), (64000.0, 64000)])
def test_context_window(window: Any, expected: int) -> None:
    assert context_window(context(0, window)) == expected


def test_context_window_absent() -> None:
    assert context_window(context(0)) is None


@pytest.mark.parametrize("window", [0, -1, -128_000, 1.5, True, "128000", [1], {}, None])
def test_context_window_must_be_positive_integer(window: Any) -> None:
    with pytest.raises(ContractError, match="contextWindow must be a positive integer"):
        context_window(context(7, window))


# --- request/header: canonical envelope -------------------------------------------------------


@pytest.mark.parametrize(
    ("system", "tools", "expected"),
    [
        ("You are terse.", [{"name": "bash"}], ("You are terse.", [{"name": "bash"}])),
        ("", [], (None, None)),  # empty counts as absent
        ("", [{"name": "x"}], (None, [{"name": "x"}])),
        ("s", [], ("s", None)),
    ],
)
def test_envelope_canonical(system: str, tools: list[Any], expected: Any) -> None:
    assert envelope(header(0, system, tools)) == expected


def test_envelope_absent_fields() -> None:
    assert envelope(header(0)) == (None, None)


@pytest.mark.parametrize("system", [5, ["s"], {"text": "s"}, True])
def test_envelope_system_not_a_string(system: Any) -> None:
    with pytest.raises(ContractError, match="system"):
        envelope(header(2, system=system))


@pytest.mark.parametrize("tools", [{"name": "bash"}, "bash", 5, True])
def test_envelope_tools_not_an_array(tools: Any) -> None:
    with pytest.raises(ContractError, match="tools"):
        envelope(header(2, tools=tools))


@pytest.mark.parametrize("data", [{}, {"header": None}, {"header": []}, {"header": "x"}])
def test_envelope_header_not_an_object(data: dict[str, Any]) -> None:
    with pytest.raises(ContractError, match="header"):
        envelope(ev("request/header", 2, data))


# --- metering ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["compaction/summary", "compaction/prune"])
def test_metering(kind: str) -> None:
    assert metering(meter(5, 1, 3, 40, kind=kind)) == Metering(1, 3, 40)


@pytest.mark.parametrize(
    "data",
    [
        {"shadowedTokenCount": 3},  # no range
        {"shadowedRange": None, "shadowedTokenCount": 3},
        {"shadowedRange": [1, 2], "shadowedTokenCount": 3},
        {"shadowedRange": {"start": 1}, "shadowedTokenCount": 3},
        {"shadowedRange": {"start": -1, "end": 2}, "shadowedTokenCount": 3},
        {"shadowedRange": {"start": 1, "end": 2.5}, "shadowedTokenCount": 3},
        {"shadowedRange": {"start": 1, "end": 2}},  # no count
        {"shadowedRange": {"start": 1, "end": 2}, "shadowedTokenCount": -3},
        {"shadowedRange": {"start": 1, "end": 2}, "shadowedTokenCount": 3.5},
        {"shadowedRange": {"start": 1, "end": 2}, "shadowedTokenCount": "3"},
        {"shadowedRange": {"start": 1, "end": 2}, "shadowedTokenCount": True},
    ],
)
def test_malformed_metering(data: dict[str, Any]) -> None:
    with pytest.raises(ContractError, match="compaction/summary at seq 5"):
        metering(ev("compaction/summary", 5, data))


@pytest.mark.parametrize(
    ("seqs", "expected"), [([], frozenset()), ([1, 3, 3], frozenset({1, 3})), ([0.0], {0})]
)
def test_shadowed_seqs(seqs: list[Any], expected: frozenset[int]) -> None:
    assert shadowed_seqs(meter(5, 1, 3, 4, shadowed=seqs)) == expected


def test_shadowed_seqs_absent_in_old_logs() -> None:
    assert shadowed_seqs(meter(5, 1, 3, 4)) == frozenset()


@pytest.mark.parametrize("seqs", [{"1": 1}, "1,2", 5, True])
def test_shadowed_seqs_not_an_array(seqs: Any) -> None:
    with pytest.raises(ContractError, match="shadowedSeqs must be an array"):
        shadowed_seqs(meter(5, 1, 3, 4, shadowed=seqs))


@pytest.mark.parametrize("seqs", [[-1], [1.5], ["1"], [None], [True], [[1]]])
def test_shadowed_seqs_members_must_be_seqs(seqs: list[Any]) -> None:
    with pytest.raises(ContractError, match="shadowedSeqs"):
        shadowed_seqs(meter(5, 1, 3, 4, shadowed=seqs))


# --- the message a surface event puts on the surface ------------------------------------------


def test_user_message_is_its_data() -> None:
    data = {"role": "user", "content": [{"type": "text", "text": "hi"}], "source": "cli"}
    assert surface_message(ev("user/message", 0, data, "append")) == data


@pytest.mark.parametrize("kind", ["assistant/message", "tool/result", "system/message"])
def test_other_surface_types_use_data_message(kind: str) -> None:
    message = {"role": "x", "content": [{"type": "text", "text": "hi"}]}
    assert surface_message(ev(kind, 0, {"message": message}, "append")) == message


def test_usage_only_assistant_step_puts_nothing_on_the_surface() -> None:
    event = ev("assistant/message", 0, {"message": {"content": []}, "usage": usage(1)}, "append")
    assert surface_message(event) is None


@pytest.mark.parametrize("kind", ["tool/result", "system/message"])
def test_empty_content_is_a_message_for_other_types(kind: str) -> None:
    message = {"role": "x", "content": []}
    assert surface_message(ev(kind, 0, {"message": message}, "append")) == message


@pytest.mark.parametrize("kind", ["assistant/message", "tool/result", "system/message"])
@pytest.mark.parametrize("data", [{}, {"message": None}, {"message": "hi"}, {"message": []}])
def test_message_must_be_an_object(kind: str, data: dict[str, Any]) -> None:
    with pytest.raises(ContractError, match=f"{kind} at seq 8: data.message must be an object"):
        surface_message(ev(kind, 8, data, "append"))
