"""What a projection is: a value with a key, a state version, and pure functions.

``apply`` returns the next state (never mutating the old one) and returns the *same*
object when nothing changed; it raises ``ContractError`` only on a broken contract.
``encode``/``decode`` give the compact JSON-able form stored in the session row; the
state version is stored beside it, so bumping it discards just this projection's rows.
"""

from typing import Any, Protocol

from stream.contract.errors import ContractError
from stream.contract.events import MAX_SAFE_INTEGER, Event


class Projection(Protocol):
    key: str
    version: int

    def init(self) -> Any: ...

    def apply(self, state: Any, event: Event) -> Any: ...

    def passive(self, state: Any) -> Any:
        """The transition for an event no projection reads: at most, expire the claim."""
        ...

    def view(self, state: Any) -> dict[str, int]: ...

    def encode(self, state: Any) -> list[Any]: ...

    def decode(self, raw: list[Any]) -> Any: ...


class StateError(ValueError):
    """A stored state that does not fit its projection's schema (validate, then commit)."""


def integer(raw: Any, what: str, minimum: int | None = None) -> int:
    if type(raw) is not int or (minimum is not None and raw < minimum):
        floor = "" if minimum is None else f" >= {minimum}"
        raise StateError(f"{what} must be an integer{floor}, got {type(raw).__name__}")
    return raw


def optional_integer(raw: Any, what: str, minimum: int | None = None) -> int | None:
    return None if raw is None else integer(raw, what, minimum)


def fields(raw: Any, count: int, what: str) -> list[Any]:
    if type(raw) is not list or len(raw) != count:
        raise StateError(f"{what} must be a list of {count}")
    return raw


def integers(raw: Any, what: str, minimum: int | None = None) -> list[int]:
    if type(raw) is not list:
        raise StateError(f"{what} must be a list of integers")
    return [integer(value, what, minimum) for value in raw]


def bounded(value: int, what: str, event: Event) -> int:
    """``value`` when it is a safe integer; past 2^53 - 1 the projection faults.

    The reference sums in doubles and goes on with rounded figures there (contract:
    "Validation"); an integer we cannot publish exactly faults instead of drifting, and
    keeps every stored and published number inside what JSON readers take.
    """
    if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        return value
    raise ContractError(
        f"{event.type} at seq {event.seq}: {what} of {value:,} passes 2^53 - 1,"
        " the largest total published exactly"
    )
