"""contextPressure: how full the next request's context window will be.

Contract: "contextPressure".

The provider's last usage sample is exact but only moves when a request reports; the
surface can change in between (a compaction shrinks it). So the state keeps a running
surface total and stamps it when a sample arrives; ``projectedTokens`` is the sample plus
the surface's signed movement since. The sample is stamped before the same event's own
delta, so an ``assistant/message`` anchors against the surface its own request saw.
"""

from typing import Any, Final, NamedTuple

from stream.contract.data import context_window, metering, usage_sample
from stream.contract.errors import ContractError
from stream.contract.events import METERING_TYPES, Event
from stream.projections.base import bounded, fields, integer, integers, optional_integer
from stream.projections.claim import Claim, surface_delta, surface_price

# tuple.__new__ builds a NamedTuple without its Python-level ``__new__`` (which compiled
# code calls like any Python function): the same value, in well under half the time, for
# the state built once per event.
_new: Final = tuple.__new__


class PressureState(NamedTuple):
    surface: int = 0
    window: int | None = None
    pressure: int | None = None
    sampled: int | None = None
    claim: Claim | None = None


class ContextPressure:
    key = "contextPressure"
    version = 1

    def init(self) -> PressureState:
        return PressureState()

    def apply(self, state: PressureState, event: Event) -> PressureState:
        if event.error is not None:
            raise ContractError(event.error)
        kind = event.type
        claim = None
        delta = 0
        if kind in METERING_TYPES:
            if event.surface_error is not None:
                raise ContractError(event.surface_error)
            claim = Claim(*metering(event))
        elif event.op is not None or event.surface_error is not None:
            delta = surface_delta(state.claim, event, surface_price(event))
        window = state.window
        if kind == "request/context":
            window = context_window(event)
        pressure, sampled = state.pressure, state.sampled
        sample = usage_sample(event)
        if sample is not None:
            pressure = bounded(sample.usage.pressure, "pressureTokens", event)
            sampled = state.surface
        surface = bounded(state.surface + delta, "surface total", event) if delta else state.surface
        if pressure is not None and sampled is not None and (delta or sample is not None):
            bounded(pressure + surface - sampled, "projectedTokens", event)
        nxt: PressureState = _new(PressureState, (surface, window, pressure, sampled, claim))
        return state if nxt == state else nxt

    def passive(self, state: PressureState) -> PressureState:
        return state if state.claim is None else state._replace(claim=None)

    def view(self, state: PressureState) -> dict[str, int]:
        out: dict[str, int] = {}
        if state.window is not None:
            out["contextWindow"] = state.window
        if state.pressure is not None and state.sampled is not None:
            out["pressureTokens"] = state.pressure
            out["projectedTokens"] = max(0, state.pressure + state.surface - state.sampled)
        return out

    def encode(self, state: PressureState) -> list[Any]:
        return [*state[:4], None if state.claim is None else list(state.claim)]

    def decode(self, raw: list[Any]) -> PressureState:
        surface, window, pressure, sampled, claim = fields(raw, 5, "contextPressure state")
        return PressureState(
            integer(surface, "surfaceTokens"),
            optional_integer(window, "contextWindow", 1),
            optional_integer(pressure, "pressureTokens", 0),
            optional_integer(sampled, "sampledSurfaceTokens"),
            None if claim is None else Claim(*integers(fields(claim, 3, "claim"), "claim", 0)),
        )


CONTEXT_PRESSURE = ContextPressure()
