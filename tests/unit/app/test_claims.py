"""The worker's claims for resets, kept up with the control topic while it runs (no broker)."""

import asyncio
from pathlib import Path

from stream.app.claims import Claims
from stream.config import Settings
from stream.ops.control import Control, ControlRead, ControlTopicError
from stream.ops.metrics import Metrics
from stream.output.headers import RESET_HEADER
from stream.session.batch import Message


def _reset(generation: int) -> Message:
    return Message(b"s", b"", "events", 0, 0, [(RESET_HEADER, str(generation).encode())])


class Topic:
    """A control topic read: what it answers, and how often it was asked."""

    def __init__(self, found: ControlRead) -> None:
        self.found: ControlRead | Exception = found
        self.reads = 0

    def __call__(self, settings: Settings, timeout: float) -> ControlRead:
        self.reads += 1
        if isinstance(self.found, Exception):
            raise self.found
        return self.found


def _claims(tmp_path: Path, topic: Topic) -> tuple[Claims, Metrics]:
    settings = Settings(state_dir=str(tmp_path), resets=True)
    stats = Metrics.create(settings)
    return Claims(settings, stats, read=topic), stats


def test_nothing_is_claimed_for_resets_until_the_control_topic_says_so(tmp_path: Path) -> None:
    topic = Topic(ControlRead(Control()))
    claims, _ = _claims(tmp_path, topic)
    # STREAM_GENERATION (1) is the deployment's base, not a claim.
    assert claims.limits.reset_generations == ()
    asyncio.run(claims.admit([_reset(1)]))
    assert topic.reads == 1 and claims.limits.reset_generations == ()
    # `stream produce --reset` claimed 2 before its first record: read again, taken.
    topic.found = ControlRead(Control(2, 0, resets=((2, 2),)))
    asyncio.run(claims.admit([_reset(2)]))
    assert claims.limits.reset_generations == ((2, 2),)
    asyncio.run(claims.admit([_reset(2), Message(b"s", b"{}", "events", 0, 1)]))
    assert topic.reads == 2  # claimed already: no read


def test_a_refused_record_or_an_untrustworthy_topic_is_reported_while_running(
    tmp_path: Path,
) -> None:
    topic = Topic(ControlRead(Control(), ("offset 0: refused, it moves generation 1 -> 9",)))
    claims, stats = _claims(tmp_path, topic)
    asyncio.run(claims.watch())
    assert stats.not_ready()[-1] == "control record: offset 0: refused, it moves generation 1 -> 9"
    topic.found = ControlTopicError("ctx-control is not a control topic a worker can trust")
    asyncio.run(claims.watch())
    assert "not a control topic a worker can trust" in stats.control_problem
    topic.found = ControlRead(Control(2, 1))  # recreated, and the operator's first step
    asyncio.run(claims.watch())
    assert stats.control_problem == ""


def test_resets_off_never_read_the_topic(tmp_path: Path) -> None:
    topic = Topic(ControlRead(Control()))
    settings = Settings(state_dir=str(tmp_path), resets=False)
    claims = Claims(settings, Metrics.create(settings), read=topic)
    asyncio.run(claims.admit([_reset(2)]))
    assert topic.reads == 0
