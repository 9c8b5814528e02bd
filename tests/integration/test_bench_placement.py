"""The live bench's placement: the worker under test on a core of its own, every thread
of it, and the threads it starts afterwards too (``benchmarks.infra.pin``)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.infra import idle_seconds, own_core, pin

pytestmark = pytest.mark.integration

# A child that starts a thread, then (told so on stdin) another one, and waits.
CHILD = """
import sys, threading, time
def wait(): time.sleep(60)
threading.Thread(target=wait, daemon=True).start()
print("one", flush=True)
sys.stdin.readline()
threading.Thread(target=wait, daemon=True).start()
print("two", flush=True)
time.sleep(60)
"""


def _allowed(pid: int) -> dict[int, str]:
    """Each thread of ``pid``: the cores it may run on, as /proc lists them."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                found[int(task.name)] = line.split(":", 1)[1].strip()
    return found


@pytest.mark.skipif(own_core() is None, reason="one core: the worker shares it")
def test_a_pinned_process_runs_every_thread_on_its_core_and_so_do_its_later_threads() -> None:
    placement = own_core()
    assert placement is not None
    assert placement.worker.isdisjoint(placement.rest)
    assert placement.worker | placement.rest == frozenset(os.sched_getaffinity(0))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "one"
        core = str(next(iter(placement.worker)))
        assert set(_allowed(child.pid).values()) != {core}  # it starts on every core
        pin(child.pid, placement.worker)
        assert len(_allowed(child.pid)) == 2
        assert set(_allowed(child.pid).values()) == {core}
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "two"
        later = _allowed(child.pid)
        assert len(later) == 3 and set(later.values()) == {core}
    finally:
        child.kill()
        child.wait()


@pytest.mark.skipif(own_core() is None, reason="one core: the worker shares it")
def test_a_core_s_idle_time_counts_only_that_core() -> None:
    placement = own_core()
    assert placement is not None
    mine = frozenset(os.sched_getaffinity(0))
    core = next(iter(placement.worker))
    os.sched_setaffinity(0, {core})
    try:
        before = idle_seconds(placement.worker), idle_seconds(placement.rest), idle_seconds()
        began = time.monotonic()
        while time.monotonic() - began < 0.5:  # this core busy
            pass
        after = idle_seconds(placement.worker), idle_seconds(placement.rest), idle_seconds()
    finally:
        os.sched_setaffinity(0, mine)
    busy, rest, machine = (a - b for a, b in zip(after, before, strict=True))
    assert busy < 0.25  # the core this loop ran on was busy most of the half second
    assert abs(busy + rest - machine) < 0.05  # the cores' idle adds up to the machine's
