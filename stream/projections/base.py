"""What a projection is: a value with a key, a state version, and pure functions.

``apply`` returns the next state (never mutating the old one) and returns the *same*
object when nothing changed; it raises ``ContractError`` only on a broken contract.
``encode``/``decode`` give the compact JSON-able form stored in the session row; the
state version is stored beside it, so bumping it discards just this projection's rows.
"""

from typing import Any, Protocol

from stream.contract.events import Event


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
