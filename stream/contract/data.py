"""Readers for the per-type ``data`` the projections use (contract: "Events", "Validation").

Each reader validates exactly what it returns and raises ``ContractError`` otherwise, so a
projection that reads a field is the one that faults on it.
"""

from typing import Any, Final, NamedTuple

from stream.contract.errors import ContractError
from stream.contract.events import Event, as_count


class Usage(NamedTuple):
    """One provider usage sample, in the reference's bucket order."""

    uncached_input: int
    output: int
    cache_read: int
    cache_write: int

    @property
    def pressure(self) -> int:
        """Prompt-side size of the request: input plus cache traffic, no output."""
        return self.uncached_input + self.cache_read + self.cache_write


class Sample(NamedTuple):
    turn: int | None
    step: int | None
    usage: Usage


class Metering(NamedTuple):
    start: int
    end: int
    tokens: int


def _count(where: str, value: Any) -> int:
    count = as_count(value)
    if count is None:
        raise ContractError(f"{where} must be a non-negative integer, got {value!r}")
    return count


def _object(where: str, value: Any) -> dict[str, Any]:
    if type(value) is not dict:
        raise ContractError(f"{where} must be an object")
    return value


# tuple.__new__ builds a NamedTuple without its Python-level ``__new__`` (which compiled
# code calls like any Python function): the same value, in well under half the time, for
# the state built once per event.
_new: Final = tuple.__new__


def read_usage(raw: Any) -> Usage | None:
    """A valid usage object as ``Usage``, else None (see ``usage_problem``).

    Runs for every sample, so it builds no error text on the way.
    """
    if type(raw) is not dict:
        return None
    read, write = raw.get("cacheReadTokens"), raw.get("cacheWriteTokens")
    usage: Usage = _new(
        Usage,
        (
            as_count(raw.get("inputTokens")),
            as_count(raw.get("outputTokens")),
            0 if read is None else as_count(read),
            0 if write is None else as_count(write),
        ),
    )
    reasoning = raw.get("reasoningTokens")
    if None in usage or (reasoning is not None and as_count(reasoning) is None):
        return None
    return usage


def usage_problem(where: str, raw: Any) -> ContractError:
    """Why ``read_usage`` refused ``raw``, as the error to raise."""
    if type(raw) is not dict:
        return ContractError(f"{where} must be an object")
    for key in ("inputTokens", "outputTokens"):
        if as_count(raw.get(key)) is None:
            return ContractError(
                f"{where}.{key} must be a non-negative integer, got {raw.get(key)!r}"
            )
    for key in ("cacheReadTokens", "cacheWriteTokens", "reasoningTokens"):
        # Absent and null both mean "no such bucket" (the reference reads them with `?? 0`).
        if raw.get(key) is not None and as_count(raw[key]) is None:
            return ContractError(f"{where}.{key} must be a non-negative integer, got {raw[key]!r}")
    return ContractError(f"{where} is not a usage object")


_ABSENT: Any = object()


def _step_id(event: Event, key: str) -> int | None:
    value = event.data.get(key, _ABSENT)
    if value is _ABSENT:
        return None
    count = as_count(value)
    if count is None:
        raise ContractError(
            f"{event.type} at seq {event.seq}: data.{key} must be a non-negative integer,"
            f" got {value!r}"
        )
    return count


# The last event read for a sample and its sample, one tuple (swapped whole).
# contextPressure and tokenUsage both read every usage-bearing event, one after the other;
# the second takes the first's sample (held here, so the event cannot be freed and its
# identity reused while it is the key).
_last_sample: tuple[Event | None, Sample | None] = (None, None)


def usage_sample(event: Event) -> Sample | None:
    """The usage an ``assistant/chunk`` (usage chunk) or ``assistant/message`` reports."""
    global _last_sample
    kind = event.type
    if kind != "assistant/chunk" and kind != "assistant/message":
        return None  # most events: told before the module global is read
    last = _last_sample
    if last[0] is event:
        return last[1]
    data = event.data
    if kind == "assistant/chunk":
        chunk = data.get("chunk")
        if type(chunk) is not dict:
            raise ContractError(f"assistant/chunk at seq {event.seq}: data.chunk must be an object")
        if chunk.get("type") != "usage":
            return None
        raw, field = chunk.get("usage"), "chunk.usage"
    elif "usage" in data:  # an assistant/message
        raw, field = data["usage"], "data.usage"
    else:
        return None
    usage = read_usage(raw)
    if usage is None:
        raise usage_problem(f"{event.type} at seq {event.seq}: {field}", raw)
    sample: Sample = _new(Sample, (_step_id(event, "turn"), _step_id(event, "step"), usage))
    _last_sample = (event, sample)
    return sample


def context_window(event: Event) -> int | None:
    """``request/context``'s window: absent means unknown; present must be positive."""
    if "contextWindow" not in event.data:
        return None
    window = as_count(event.data["contextWindow"])
    if window is None or window == 0:
        raise ContractError(
            f"request/context at seq {event.seq}: contextWindow must be a positive integer,"
            f" got {event.data['contextWindow']!r}"
        )
    return window


def envelope(event: Event) -> tuple[str | None, list[Any] | None]:
    """``request/header``'s canonical (system, tools): empty values count as absent."""
    where = f"request/header at seq {event.seq}"
    header = _object(f"{where}: data.header", event.data.get("header"))
    system = header.get("system")
    if "system" in header and type(system) is not str:
        raise ContractError(f"{where}: header.system must be a string")
    tools = header.get("tools")
    if "tools" in header and type(tools) is not list:
        raise ContractError(f"{where}: header.tools must be an array")
    return system or None, tools or None


def metering(event: Event) -> Metering:
    """The shadow price a ``compaction/*`` event arms (contract: "The shadow-price claim")."""
    where = f"{event.type} at seq {event.seq}"
    shadowed = _object(f"{where}: data.shadowedRange", event.data.get("shadowedRange"))
    return Metering(
        _count(f"{where}: shadowedRange.start", shadowed.get("start")),
        _count(f"{where}: shadowedRange.end", shadowed.get("end")),
        _count(f"{where}: shadowedTokenCount", event.data.get("shadowedTokenCount")),
    )


def shadowed_seqs(event: Event) -> frozenset[int]:
    """The surface seqs a metering event shadows; absent in old logs (then: none known)."""
    raw = event.data.get("shadowedSeqs")
    if raw is None:
        return frozenset()
    if type(raw) is not list:
        raise ContractError(f"{event.type} at seq {event.seq}: shadowedSeqs must be an array")
    return frozenset(_count(f"{event.type} at seq {event.seq}: shadowedSeqs[]", s) for s in raw)


def surface_message(event: Event) -> Any | None:
    """The message a surface event puts on the surface; None for a usage-only step."""
    data = event.data
    if event.type == "user/message":
        return data
    message = data.get("message")
    if type(message) is not dict:
        raise ContractError(f"{event.type} at seq {event.seq}: data.message must be an object")
    if event.type == "assistant/message" and message.get("content") == []:
        return None
    return message
