"""contextBreakdown: what fills the context — system prompt, tool schemas, messages.

Contract: "contextBreakdown"; background: docs/notes/007.

State version 6 retains only the surviving system prompts ``(seq, price)`` in surface
order, one running surface total, and at most one claim that also remembers which
retained prompts the metering event shadows. Checkpoint size follows the number of
retained prompts, never the number of messages.
"""

from typing import Any, Final, NamedTuple

from stream.contract.data import envelope, metering, shadowed_seqs
from stream.contract.errors import ContractError
from stream.contract.events import APPEND, METERING_TYPES, Event, Replace
from stream.pricing.estimate import price_envelope_system, price_envelope_tools
from stream.projections.base import StateError, bounded, fields, integer, integers
from stream.projections.claim import check_claim, surface_price

Prompt = tuple[int, int]  # (seq, price)


class BreakdownClaim(NamedTuple):
    start: int
    end: int
    tokens: int
    prompts: tuple[int, ...]  # seqs of retained prompts the metering event shadows


# tuple.__new__ builds a NamedTuple without its Python-level ``__new__`` (which compiled
# code calls like any Python function): the same value, in well under half the time, for
# the state built once per event.
_new: Final = tuple.__new__


class BreakdownState(NamedTuple):
    tools: int = 0
    header_system: int = 0
    surface: int = 0
    prompts: tuple[Prompt, ...] = ()
    claim: BreakdownClaim | None = None


def _replace(
    state: BreakdownState, event: Event, op: Replace, price: int
) -> tuple[int, tuple[Prompt, ...]]:
    """(surface delta, retained prompts) after a replacement."""
    is_system = event.type == "system/message"
    claim = state.claim
    if claim is not None:
        check_claim(claim.start, claim.end, op, event.seq)
        if is_system:
            raise ContractError(
                f"system/message at seq {event.seq} cannot take the place of metered range"
                f" {op.start}-{op.end}"
            )
        gone = set(claim.prompts)
        return price - claim.tokens, tuple(p for p in state.prompts if p[0] not in gone)
    if op.start == op.end:
        for index, (seq, old_price) in enumerate(state.prompts):
            if seq == op.start:
                # An unmetered rewrite of one retained prompt prices exactly: we hold its price.
                rest = state.prompts[:index] + state.prompts[index + 1 :]
                if is_system:
                    rest = (*rest[:index], (event.seq, price), *rest[index:])
                return price - old_price, rest
    if is_system:
        raise ContractError(
            f"system/message at seq {event.seq} replaces range {op.start}-{op.end}, which is"
            " not exactly one retained system prompt"
        )
    return 0, state.prompts  # unmetered, unpriced: neutral (docs/notes/009)


class ContextBreakdown:
    key = "contextBreakdown"
    version = 6

    def __init__(self, max_prompts: int = 1_000) -> None:
        # Retained prompts are the one part of the state that grows with the log; past this
        # many the projection faults instead of letting one session's row outgrow a record.
        self.max_prompts = max_prompts

    def init(self) -> BreakdownState:
        return BreakdownState()

    def apply(self, state: BreakdownState, event: Event) -> BreakdownState:
        if event.error is not None:
            raise ContractError(event.error)
        kind = event.type
        tools, header_system, prompts = state.tools, state.header_system, state.prompts
        delta = 0
        claim = None
        if kind in METERING_TYPES:
            if event.surface_error is not None:
                raise ContractError(event.surface_error)
            named = shadowed_seqs(event)
            claim = BreakdownClaim(
                *metering(event), tuple(seq for seq, _ in prompts if seq in named)
            )
        elif event.op is not None or event.surface_error is not None:
            price = surface_price(event)
            op = event.op
            if op == APPEND:
                delta = price
                if kind == "system/message":
                    if len(prompts) >= self.max_prompts:
                        raise ContractError(
                            f"system/message at seq {event.seq} would retain more than"
                            f" {self.max_prompts:,} system prompts (STREAM_MAX_SYSTEM_PROMPTS)"
                        )
                    prompts = (*prompts, (event.seq, price))
            else:
                assert isinstance(op, Replace)
                delta, prompts = _replace(state, event, op, price)
        elif kind == "request/header":
            system, tool_list = envelope(event)
            header_system = price_envelope_system(system)
            tools = price_envelope_tools(tool_list)
        surface = bounded(state.surface + delta, "surface total", event) if delta else state.surface
        nxt: BreakdownState = _new(BreakdownState, (tools, header_system, surface, prompts, claim))
        return state if nxt == state else nxt

    def passive(self, state: BreakdownState) -> BreakdownState:
        return state if state.claim is None else state._replace(claim=None)

    def view(self, state: BreakdownState) -> dict[str, int]:
        for _, price in reversed(state.prompts):
            if price > 0:
                return {
                    "systemTokens": price,
                    "toolsTokens": state.tools,
                    "messageTokens": max(0, state.surface - price),
                }
        # No retained prompt: legacy logs carry the prompt in the request envelope.
        return {
            "systemTokens": state.header_system,
            "toolsTokens": state.tools,
            "messageTokens": state.surface,
        }

    def encode(self, state: BreakdownState) -> list[Any]:
        claim = state.claim
        return [
            state.tools,
            state.header_system,
            state.surface,
            [n for prompt in state.prompts for n in prompt],
            None if claim is None else [claim.start, claim.end, claim.tokens, list(claim.prompts)],
        ]

    def decode(self, raw: list[Any]) -> BreakdownState:
        tools, header_system, surface, flat, claim = fields(raw, 5, "contextBreakdown state")
        flat = integers(flat, "retained prompts", 0)
        if len(flat) % 2:
            raise StateError("retained prompts must be (seq, price) pairs")
        if claim is not None:
            start, end, tokens, named = fields(claim, 4, "claim")
            s, e, t = integers([start, end, tokens], "claim", 0)
            claim = BreakdownClaim(s, e, t, tuple(integers(named, "claim prompts", 0)))
        return BreakdownState(
            integer(tools, "toolsTokens", 0),
            integer(header_system, "headerSystemTokens", 0),
            integer(surface, "surfaceTokens"),
            tuple(zip(flat[::2], flat[1::2], strict=True)),
            claim,
        )


CONTEXT_BREAKDOWN = ContextBreakdown()
