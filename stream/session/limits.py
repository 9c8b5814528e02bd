"""What one input may cost (``Limits``): past these bounds input is dead-lettered with a
reason, never folded. The worker builds them from its settings (``Settings.limits``), the
offline tools use the defaults."""

from dataclasses import dataclass

from stream.contract.errors import MAX_ERROR_CHARS
from stream.projections.base import Projection
from stream.session.processor import MAX_SYSTEM_PROMPTS, projections


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on what one input may cost; past them input is dead-lettered with a reason.

    Defaults fit Kafka's default 1 MiB record limit, so every record the worker produces
    (rows, updates, dead letters) stays under the producer's request size.
    """

    message_bytes: int = 1_000_000
    event_bytes: int = 1_000_000  # one event (a segment's element as compact JSON)
    key_bytes: int = 1_024
    segment_events: int = 10_000
    error_chars: int = MAX_ERROR_CHARS
    dead_letter_bytes: int = 900_000  # value kept in a dead letter; the rest is cut
    # Positions of a segment's unreadable elements a dead letter lists (it counts them all).
    dead_letter_positions: int = 100
    resets: bool = True  # take reset records from the input topic (STREAM_RESETS)
    # The generations a reset may name: those claimed for resets on the control topic
    # (``stream produce --reset`` claims one before it sends); any other is dead-lettered,
    # the deployment's own generation included. Inclusive ranges, ascending; None: any
    # (the offline tools: no topic).
    reset_generations: tuple[tuple[int, int], ...] | None = None
    system_prompts: int = MAX_SYSTEM_PROMPTS  # retained per session (contextBreakdown)
    session_ttl: int = 0  # ms of stream time a session may idle before it expires; 0: never

    @property
    def folds(self) -> tuple[Projection, ...]:
        """The projections this fold runs under these limits."""
        return projections(self.system_prompts)
