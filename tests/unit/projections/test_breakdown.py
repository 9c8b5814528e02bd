"""contextBreakdown, state version 6 (contract: "contextBreakdown")."""

from typing import Any

import pytest

from stream.contract.errors import ContractError
from stream.projections.breakdown import CONTEXT_BREAKDOWN
from stream.projections.claim import surface_price

from ..builders import (
    assistant,
    ev,
    fold,
    header,
    meter,
    noop,
    replace,
    system,
    tool_result,
    usage,
    usage_chunk,
    user,
)

B = CONTEXT_BREAKDOWN
TERSE = "You are terse."  # 8
LONG = "You are a careful assistant."  # 28 chars: 7 + 4 = 11
TOOLS = [{"name": "bash", "description": "run", "parameters": {"type": "object"}}]  # 21


def view(events: list[Any]) -> dict[str, int]:
    return B.view(fold(B, events))


def bd(system_tokens: int, tools: int, messages: int) -> dict[str, int]:
    return {"systemTokens": system_tokens, "toolsTokens": tools, "messageTokens": messages}


def test_key_version_and_initial_view() -> None:
    assert (B.key, B.version) == ("contextBreakdown", 6)
    assert B.view(B.init()) == bd(0, 0, 0)


# --- request/header: the canonical envelope ---------------------------------------------------


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        ([header(0, TERSE, TOOLS)], bd(8, 21, 0)),
        ([header(0, "", [])], bd(0, 0, 0)),  # empty system/tools count as absent
        ([header(0)], bd(0, 0, 0)),
        ([header(0, TERSE, TOOLS), header(1, "", TOOLS)], bd(0, 21, 0)),  # last header wins
        ([header(0, TERSE, TOOLS), header(1)], bd(0, 0, 0)),
        ([header(0, TERSE), user(1, "abcd")], bd(8, 0, 9)),  # legacy: prompt in the envelope
    ],
)
def test_header(events: list[Any], expected: dict[str, int]) -> None:
    assert view(events) == expected


# --- appends ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("events", "expected", "prompts"),
    [
        ([user(0, "abcd")], bd(0, 0, 9), ()),
        ([system(0, TERSE), user(1, "abcd")], bd(8, 0, 9), ((0, 8),)),
        # a retained prompt beats the envelope's
        ([header(0, LONG, TOOLS), system(1, TERSE), user(2, "abcd")], bd(8, 21, 9), ((1, 8),)),
        # the last retained prompt with a positive price gives systemTokens
        ([system(0, TERSE), system(1, LONG), user(2, "abcd")], bd(11, 0, 8 + 9), ((0, 8), (1, 11))),
        # an empty prompt joins the list but is skipped by the view
        ([system(0, TERSE), system(1, ""), user(2, "abcd")], bd(8, 0, 9), ((0, 8), (1, 0))),
        # with only empty prompts, the envelope speaks (and the surface is unfloored)
        ([header(0, LONG), system(1, ""), user(2, "abcd")], bd(11, 0, 9), ((1, 0),)),
        ([assistant(0, usage=usage(5))], bd(0, 0, 0), ()),  # usage-only step prices 0
        ([user(0, "abcd"), tool_result(1, "abcd"), assistant(2, "abcd")], bd(0, 0, 9 + 13 + 9), ()),
    ],
)
def test_appends(events: list[Any], expected: dict[str, int], prompts: tuple[Any, ...]) -> None:
    state = fold(B, events)
    assert B.view(state) == expected
    assert state.prompts == prompts


def test_only_system_prompts_are_retained() -> None:
    state = fold(B, [user(i, "abcd") for i in range(500)])
    assert state.prompts == ()
    assert state.surface == 500 * 9
    assert B.encode(state) == [0, 0, 4500, [], None]


# --- metered replacements ---------------------------------------------------------------------


def test_metered_replace_drops_the_prompts_shadowed_seqs_names() -> None:
    events = [
        system(0, TERSE),  # 8
        user(1, "abcd"),  # 9
        system(2, LONG),  # 11
        user(3, "abcd"),  # 9
        meter(4, 0, 3, 37, shadowed=[0, 1, 2, 3]),
        user(5, "summary", op=replace(0, 3)),  # 2 + 4 + 4 = 10
    ]
    state = fold(B, events)
    assert state.prompts == ()
    assert state.surface == 37 - 37 + 10
    assert B.view(state) == bd(0, 0, 10)


def test_membership_not_position_decides_which_prompts_leave() -> None:
    events = [
        system(0, TERSE),
        user(1, "abcd"),
        system(2, LONG),
        # the range covers 1..2, but shadowedSeqs names only seq 0 (authoritative)
        meter(3, 1, 2, 20, shadowed=[0]),
        user(4, "abcd", op=replace(1, 2)),
    ]
    state = fold(B, events)
    assert state.prompts == ((2, 11),)
    assert state.surface == 8 + 9 + 11 - 20 + 9


def test_metered_replace_without_shadowed_seqs_keeps_prompts() -> None:
    # old logs: no shadowedSeqs, so no retained prompt is known to be shadowed
    events = [system(0, TERSE), user(1, "abcd"), meter(2, 1, 1, 9), user(3, "ab", op=replace(1, 1))]
    state = fold(B, events)
    assert state.prompts == ((0, 8),)
    assert B.view(state) == bd(8, 0, 9)  # surface 8 + 9 - 9 + 9 ("ab" prices 9)


def test_shadowed_seqs_naming_no_retained_prompt_is_harmless() -> None:
    events = [
        system(0, TERSE),
        user(1, "abcd"),
        meter(2, 1, 1, 9, shadowed=[1, 99]),
        user(3, "ab", op=replace(1, 1, v3=True)),
    ]
    assert fold(B, events).prompts == ((0, 8),)


def test_metered_replace_over_another_range_is_an_error() -> None:
    state = fold(B, [system(0, TERSE), user(1, "abcd"), meter(2, 1, 1, 9, shadowed=[1])])
    with pytest.raises(ContractError) as raised:
        B.apply(state, user(3, "ab", op=replace(0, 1)))
    assert str(raised.value).endswith(
        "replace at seq 3 over range 0-1 has no adjacent shadow price (armed claim covers 1-1)"
    )


@pytest.mark.parametrize("op", [replace(1, 1), replace(1, 1, v3=True)])
def test_system_message_in_place_of_a_metered_range_is_an_error(op: Any) -> None:
    state = fold(B, [system(0, TERSE), user(1, "abcd"), meter(2, 1, 1, 9, shadowed=[1])])
    with pytest.raises(ContractError, match="system/message at seq 3"):
        B.apply(state, system(3, LONG, op=op))


def test_system_message_over_a_metered_prompt_is_an_error() -> None:
    state = fold(B, [system(0, TERSE), meter(1, 0, 0, 8, shadowed=[0])])
    with pytest.raises(ContractError, match="metered range 0-0"):
        B.apply(state, system(2, LONG, op=replace(0, 0)))


# --- unmetered replacements -------------------------------------------------------------------


def test_unmetered_system_rewrite_of_one_prompt_prices_exactly_and_keeps_position() -> None:
    base = [system(0, TERSE), user(1, "abcd"), system(2, LONG), user(3, "abcd")]
    state = fold(B, [*base, system(4, "abcd" * 10, op=replace(0, 0))])  # 14
    assert state.prompts == ((4, 14), (2, 11))  # took seq 0's position
    assert state.surface == 8 + 9 + 11 + 9 - 8 + 14
    assert B.view(state) == bd(11, 0, state.surface - 11)  # the last one still speaks


def test_unmetered_system_rewrite_of_the_last_prompt_changes_system_tokens() -> None:
    base = [system(0, TERSE), user(1, "abcd"), system(2, LONG)]
    state = fold(B, [*base, system(3, "abcd" * 10, op=replace(2, 2, v3=True))])
    assert state.prompts == ((0, 8), (3, 14))
    assert B.view(state) == bd(14, 0, 8 + 9)


def test_unmetered_rewrite_to_an_empty_prompt() -> None:
    state = fold(
        B, [header(0, LONG), system(1, TERSE), user(2, "abcd"), system(3, "", op=replace(1, 1))]
    )
    assert state.prompts == ((3, 0),)
    assert B.view(state) == bd(11, 0, 9)  # no positive prompt: envelope and raw surface


@pytest.mark.parametrize(
    "replacement",
    [
        user(4, "abcd", op=replace(2, 2)),
        assistant(4, "abcd", op=replace(2, 2)),
        tool_result(4, "abcd", op=replace(2, 2)),
        assistant(4, op=replace(2, 2)),  # usage-only: prices 0
    ],
    ids=lambda e: e.type,
)
def test_unmetered_non_system_replacement_of_one_prompt_removes_it(replacement: Any) -> None:
    base = [system(0, TERSE), user(1, "abcd"), system(2, LONG), user(3, "abcd")]
    state = fold(B, [*base, replacement])
    price = surface_price(replacement)  # 0 for the usage-only step, 13 for a tool result
    assert state.prompts == ((0, 8),)
    assert state.surface == 8 + 9 + 11 + 9 - 11 + price
    assert B.view(state) == bd(8, 0, state.surface - 8)


@pytest.mark.parametrize(
    "op",
    [
        replace(1, 1),  # a user message, not a prompt
        replace(0, 1),  # a range including a prompt
        replace(0, 2),
        replace(7, 7),  # not on the surface at all
    ],
)
def test_unmetered_system_replace_over_anything_else_is_an_error(op: Any) -> None:
    state = fold(B, [system(0, TERSE), user(1, "abcd"), system(2, LONG)])
    with pytest.raises(ContractError, match="system/message at seq 3"):
        B.apply(state, system(3, "x", op=op))


def test_unmetered_system_replace_of_an_already_removed_prompt_is_an_error() -> None:
    state = fold(
        B,
        [
            system(0, TERSE),
            user(1, "abcd"),
            meter(2, 0, 1, 17, shadowed=[0, 1]),
            user(3, "abcd", op=replace(0, 1)),
        ],
    )
    assert state.prompts == ()
    with pytest.raises(ContractError):
        B.apply(state, system(4, "x", op=replace(0, 0)))


@pytest.mark.parametrize(
    "op", [replace(1, 1), replace(0, 1), replace(1, 3), replace(42, 42), replace(3, 1)]
)
def test_other_unmetered_replace_is_neutral(op: Any) -> None:
    state = fold(B, [system(0, TERSE), user(1, "abcd"), user(2, "abcd" * 3), user(3, "ab")])
    after = B.apply(state, user(4, "abcd" * 50, op=op))
    assert after.surface == state.surface
    assert after.prompts == state.prompts


def test_expired_claim_behaves_like_no_claim() -> None:
    base = [system(0, TERSE), user(1, "abcd"), meter(2, 0, 0, 8, shadowed=[0]), noop(3)]
    # a system rewrite of the prompt is now an unmetered rewrite of one retained prompt
    state = fold(B, [*base, system(4, LONG, op=replace(0, 0))])
    assert state.prompts == ((4, 11),)
    assert state.surface == 8 + 9 - 8 + 11
    # and a non-system replacement elsewhere is neutral
    state = fold(B, [*base, user(4, "abcd" * 9, op=replace(1, 1))])
    assert state.surface == 8 + 9


# --- the view ---------------------------------------------------------------------------------


def test_message_tokens_floored_at_zero_with_a_prompt() -> None:
    events = [
        system(0, LONG),  # 11
        user(1, "abcd"),  # 9
        meter(2, 1, 1, 100, shadowed=[1]),  # the producer over-claims
        user(3, "", op=replace(1, 1)),  # 8 - 100
    ]
    state = fold(B, events)
    assert state.surface == 11 + 9 - 100 + 8
    assert B.view(state) == bd(11, 0, 0)


def test_message_tokens_unfloored_without_a_prompt() -> None:
    events = [
        header(0, TERSE),
        user(1, "abcd"),
        meter(2, 1, 1, 100, shadowed=[1]),
        user(3, "", op=replace(1, 1)),
    ]
    assert B.view(fold(B, events)) == bd(8, 0, 9 - 100 + 8)


# --- other events, malformed input, codec -----------------------------------------------------


def test_non_surface_events_change_nothing() -> None:
    state = fold(B, [system(0, TERSE), user(1, "abcd")])
    for event in [
        noop(2),
        usage_chunk(3, usage(5)),
        ev("request/context", 4, {"contextWindow": 10}),
    ]:
        assert B.apply(state, event) is state


@pytest.mark.parametrize(
    "event",
    [
        ev("system/message", 0, {"message": {"content": [{"type": "text", "text": "x"}]}}),
        ev("system/message", 0, {"message": "You are terse."}, "append"),
        ev("system/message", 0, {"message": {"content": "You are terse."}}, "append"),
        ev("system/message", 0, {"message": {"content": [{"type": "text", "text": 8}]}}, "append"),
        ev("request/header", 0, {"header": {"system": 5}}),
        ev("request/header", 0, {"header": {"tools": {}}}),
        ev("request/header", 0, {}),
        ev("request/header", 0, {"header": {}}, "append"),
        ev(
            "compaction/summary",
            0,
            {"shadowedRange": {"start": 0, "end": 0}, "shadowedTokenCount": 1, "shadowedSeqs": 0},
        ),
        ev(
            "compaction/summary",
            0,
            {
                "shadowedRange": {"start": 0, "end": 0},
                "shadowedTokenCount": 1,
                "shadowedSeqs": [-1],
            },
        ),
        ev(
            "tool/result",
            0,
            {"message": {"content": [{"type": "tool-call", "name": "x"}]}},
            "append",
        ),
        ev(
            "user/message",
            0,
            {"content": [{"type": "tool-call", "name": "x", "arguments": {"a": 1}}]},
            "append",
        ),
        ev("turn/start", 0, [], None),
    ],
)
def test_malformed_events_are_contract_errors(event: Any) -> None:
    with pytest.raises(ContractError):
        B.apply(B.init(), event)


def test_codec_round_trip() -> None:
    state = fold(
        B,
        [
            header(0, TERSE, TOOLS),
            system(1, LONG),
            user(2, "abcd"),
            system(3, ""),
            meter(4, 1, 2, 20, shadowed=[1, 2]),
        ],
    )
    assert state.claim is not None
    assert state.claim.prompts == (1,)
    assert B.decode(B.encode(state)) == state
    assert B.decode(B.encode(B.init())) == B.init()
