"""tokenUsage: running totals of provider-reported usage (contract: "tokenUsage").

A usage chunk gives an early sample that survives a failed request; the final
``assistant/message`` of the same (turn, step) then replaces that contribution instead of
adding to it. One ``last`` slot suffices because a legal log reports one step's usage in
adjacent samples: once a later step reports, an earlier one never does again.
"""

from typing import Any, Final, NamedTuple

from stream.contract.data import Usage, usage_sample
from stream.contract.errors import ContractError
from stream.contract.events import MAX_SAFE_INTEGER, Event
from stream.projections.base import bounded, fields, integers, optional_integer

ZERO = Usage(0, 0, 0, 0)
VIEW_NAMES = ("uncachedInputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens")


# tuple.__new__ builds a NamedTuple without its Python-level ``__new__`` (which compiled
# code calls like any Python function): the same value, in well under half the time, for
# the state built once per event.
_new: Final = tuple.__new__


class UsageState(NamedTuple):
    totals: Usage = ZERO
    last: tuple[int | None, int | None, Usage] | None = None  # (turn, step, sample)


class TokenUsage:
    key = "tokenUsage"
    version = 1

    def init(self) -> UsageState:
        return UsageState()

    def apply(self, state: UsageState, event: Event) -> UsageState:
        if event.error is not None:
            raise ContractError(event.error)
        sample = usage_sample(event)
        if sample is None:
            return state
        last = state.last
        previous = ZERO
        if last is not None and last[0] == sample.turn and last[1] == sample.step:
            if last[2] == sample.usage:
                return state  # an identical repeat changes nothing
            previous = last[2]
        t, n = state.totals, sample.usage
        totals: Usage = _new(
            Usage,
            (
                t.uncached_input - previous.uncached_input + n.uncached_input,
                t.output - previous.output + n.output,
                t.cache_read - previous.cache_read + n.cache_read,
                t.cache_write - previous.cache_write + n.cache_write,
            ),
        )
        if max(totals) > MAX_SAFE_INTEGER:  # each total is >= 0: only the top can pass
            for name, total in zip(VIEW_NAMES, totals, strict=True):
                bounded(total, f"{name} total", event)
        nxt: UsageState = _new(UsageState, (totals, (sample.turn, sample.step, sample.usage)))
        return nxt

    def passive(self, state: UsageState) -> UsageState:
        return state

    def view(self, state: UsageState) -> dict[str, int]:
        totals = state.totals
        return {
            "uncachedInputTokens": totals.uncached_input,
            "outputTokens": totals.output,
            "cacheReadTokens": totals.cache_read,
            "cacheWriteTokens": totals.cache_write,
        }

    def encode(self, state: UsageState) -> list[Any]:
        last = state.last
        return [list(state.totals), None if last is None else [last[0], last[1], *last[2]]]

    def decode(self, raw: list[Any]) -> UsageState:
        totals, last = fields(raw, 2, "tokenUsage state")
        sample = None
        if last is not None:
            turn, step, *numbers = fields(last, 6, "last sample")
            sample = (
                optional_integer(turn, "turn"),
                optional_integer(step, "step"),
                Usage(*integers(numbers, "last sample", 0)),
            )
        return UsageState(Usage(*integers(fields(totals, 4, "totals"), "totals")), sample)


TOKEN_USAGE = TokenUsage()
