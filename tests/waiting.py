"""Waiting on a condition, not on time: the one helper every test that waits uses.

A fixed sleep is either too short on a slow machine (a flaky test) or too long on a fast
one (a slow suite); a test waits for the condition it needs, with a timeout that only a
failure reaches. ``wait_until`` polls from a thread's code (integration tests against real
processes); ``until`` from a coroutine, yielding to the loop between checks, so the
subject running on the same loop makes progress.

A subject whose behaviour depends on time (a cooldown, a rate limit, a token's end) takes
a clock; a test hands it a ``FakeClock`` and moves it, so no real time has to pass
(docs/notes/033-tests-wait-on-conditions.md).
"""

import asyncio
import time
from collections.abc import Awaitable, Callable

DEFAULT_TIMEOUT = 10.0


def wait_until(
    check: Callable[[], object],
    timeout: float = DEFAULT_TIMEOUT,
    what: str = "the condition",
    every: float = 0.05,
) -> None:
    """Return as soon as ``check()`` is true; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


async def until(
    check: Callable[[], object | Awaitable[object]],
    timeout: float = DEFAULT_TIMEOUT,
    what: str = "the condition",
    every: float = 0.001,
) -> None:
    """``wait_until`` for a coroutine: ``check`` may be sync or async."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = check()
        if isinstance(result, Awaitable):
            result = await result
        if result:
            return
        if asyncio.get_running_loop().time() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(every)


class FakeClock:
    """A clock the test moves: ``clock()`` reads it, ``advance`` (or ``sleep``, for a
    subject that sleeps on its clock) moves it at once."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float) -> None:
        self.now += seconds


__all__ = ["DEFAULT_TIMEOUT", "FakeClock", "until", "wait_until"]
