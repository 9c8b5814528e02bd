"""The one verifier every fault scenario ends with (``verify``), and what it reads: the
group's committed offsets and lag, the output and dead-letter topics, Redis, and the
offline fold of the ledger's sessions (``tests.integration.faults``). Ground truth is what
was produced, never what the service reports; ``shortfall`` says where a run fell short."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import orjson
from confluent_kafka import Consumer, Message, TopicPartition

from tests.integration.faults import (
    Ledger,
    alive,
    assert_alive,
    client_conf,
    input_topic,
    wait_live,
)
from tests.integration.harness import REPO, Deployment, Worker, offline_fold


def offline_counts(paths: Sequence[Path]) -> dict[str, int]:
    """``stream fold --counts``: the offline totals by outcome; the logs are all readable."""
    done = subprocess.run(
        [sys.executable, "-m", "stream", "fold", "--counts", *map(str, paths)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    unreadable = [line for line in done.stderr.splitlines() if "unreadable" in line]
    assert not unreadable, f"the ledger wrote unreadable lines: {unreadable[:3]}"
    found = re.search(r"folded (\d+), duplicate (\d+), faulted (\d+)", done.stderr)
    assert found, done.stderr[-500:]
    folded, duplicate, faulted = map(int, found.groups())
    return {"folded": folded, "duplicate": duplicate, "faulted": faulted}


def _group_offsets(deployment: Deployment) -> dict[int, tuple[int, int, int]]:
    """Per input partition: (the group's committed offset or -1, low and high watermark)."""
    topic = input_topic(deployment)
    consumer = Consumer(
        client_conf(deployment)
        | {"group.id": deployment.name, "enable.auto.commit": False, "log_level": 2}
    )
    try:
        partitions = consumer.list_topics(topic, timeout=20).topics[topic].partitions
        found = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=20)
        offsets = {}
        for tp in found:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, tp.partition), timeout=20
            )
            offsets[tp.partition] = (tp.offset if tp.offset >= 0 else -1, low, high)
        return offsets
    finally:
        consumer.close()


def consumer_lag(deployment: Deployment) -> dict[int, int]:
    """Per input partition, records the group has not committed past (0: caught up)."""
    return {
        p: max(0, high - (done if done >= 0 else low))
        for p, (done, low, high) in _group_offsets(deployment).items()
    }


def end_offsets(deployment: Deployment) -> dict[int, int]:
    """Per input partition, the offset the next record will get."""
    return {p: high for p, (_, _, high) in _group_offsets(deployment).items()}


def peak_rss(worker: Worker) -> int:
    """The worker process' peak resident memory so far, in bytes (VmHWM)."""
    assert worker.process is not None
    status = Path(f"/proc/{worker.process.pid}/status").read_text()
    (kib,) = re.findall(r"^VmHWM:\s+(\d+) kB$", status, re.M)
    return int(kib) * 1024


def committed(deployment: Deployment) -> dict[int, int]:
    """Per input partition, the group's committed offset (-1: none yet)."""
    return {p: done for p, (done, _, _) in _group_offsets(deployment).items()}


def wait_committed(deployment: Deployment, timeout: float = 120) -> None:
    """Until the group has committed an offset on every input partition.

    Scenarios about other faults wait for this before their first one, so their faults
    meet a group that has committed; the SIGKILL scenario alone also covers restarts
    before the first commit (where records were once lost: docs/reliability.md, bug 1).
    """
    live = [w for w in deployment.workers if alive(w)]
    wait_live(
        live,
        lambda: all(offset > 0 for offset in committed(deployment).values()),
        timeout,
        "a committed offset on every input partition",
        every=0.5,
    )


def dead_letters(deployment: Deployment) -> list[Message]:
    return list(deployment.consume_all(f"{deployment.name}.dlq", timeout=300))


# A dead letter's parts: (the input events it stands for, the segment positions it names:
# None for a whole record). One letter per input record (docs/notes/028).
LetterParts = tuple[int, tuple[int, ...] | None]

# What a dead letter lists of a segment's unreadable elements (``Limits.dead_letter_positions``).
LISTED_POSITIONS: Final = 100


def expected_letters(
    dead: Iterable[tuple[int, int, int | None]], listed: int = LISTED_POSITIONS
) -> dict[tuple[int, int], LetterParts]:
    """The one dead letter each input record must get, from the unreadable parts produced
    (partition, offset, segment index or None): how many, and the first ``listed``
    positions."""
    by_record: dict[tuple[int, int], list[int | None]] = {}
    for partition, offset, index in dead:
        by_record.setdefault((partition, offset), []).append(index)
    out: dict[tuple[int, int], LetterParts] = {}
    for place, indexes in by_record.items():
        if None in indexes:
            assert indexes == [None], (place, indexes)  # whole, or elements: never both
            out[place] = (1, None)
        else:
            out[place] = (len(indexes), tuple(sorted(i for i in indexes if i is not None))[:listed])
    return out


def letter_parts(
    deployment: Deployment, letters: Iterable[Message]
) -> dict[tuple[int, int], LetterParts]:
    """What the dead-letter topic's records say they stand for, by source (partition,
    offset); a redelivery may send a record's letter again, and it must say the same."""
    topic = input_topic(deployment)
    found: dict[tuple[int, int], LetterParts] = {}
    for letter in letters:
        headers = {k: v for k, v in letter.headers() or []}
        assert headers["source-topic"] == topic.encode(), headers
        assert headers["reason"], headers
        place = (int(headers["source-partition"]), int(headers["source-offset"]))
        count = int(headers.get("count", b"1"))
        index = headers.get("segment-index")
        positions: tuple[int, ...] | None = None
        if index is not None:
            listed = headers.get("segment-indexes")
            positions = (int(index),) if listed is None else tuple(map(int, listed.split(b",")))
            assert positions[0] == int(index), headers
        parts = (count, positions)
        assert found.setdefault(place, parts) == parts, (place, found[place], parts)
    return found


def latest_output(deployment: Deployment) -> dict[str, Any]:
    """``Deployment.latest_output`` with time to read a soak's output topic to its end."""
    latest: dict[str, Any] = {}
    for record in deployment.consume_all(f"{deployment.name}.context", timeout=300):
        latest[record.key().decode()] = orjson.loads(record.value())
    return latest


def redis_updates(deployment: Deployment, sessions: Sequence[str]) -> dict[str, Any]:
    client = deployment.redis()
    pipe = client.pipeline(transaction=False)
    for session in sessions:
        pipe.hget(f"{deployment.prefix}session:{session}", "update")
    values = pipe.execute()
    return {
        s: None if v is None else orjson.loads(v) for s, v in zip(sessions, values, strict=True)
    }


def _str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def shortfall(deployment: Deployment, ledger: Ledger) -> str:
    """Which sessions Redis holds fewer events for than were produced, and what the
    output topic's latest update says of them (for a failure message)."""
    client = deployment.redis()
    raw = client.hgetall(f"{deployment.prefix}tallies")
    tallies = {_str(k): sum(map(int, v.split())) for k, v in raw.items()}
    short = {
        s: (n, tallies.get(s, 0))
        for s, n in ledger.session_events.items()
        if tallies.get(s, 0) != n
    }
    latest: dict[str, tuple[int, str]] = {}
    for record in deployment.consume_all(f"{deployment.name}.context", timeout=300):
        headers = dict(record.headers() or [])
        latest[record.key().decode()] = (record.offset(), headers.get("tally", b"").decode())
    lines = [
        f"totals {deployment.stats()} for {ledger.total} produced;"
        f" {len(short)} of {len(ledger.session_events)} sessions short in Redis:"
    ]
    for s, (n, have) in sorted(short.items())[:10]:
        update = deployment.redis_update(s) or {}
        lines.append(
            f"  {s!r} (partition {ledger.partition_of.get(s)}): produced {n} events,"
            f" redis tally {have}, output topic latest (offset, tally) {latest.get(s)},"
            f" faults {str(update.get('faults'))[:300]}"
        )
    # What the fetch did about offsets it had to account for (docs/notes/024).
    noted = [
        f"  {worker.worker_id}: {line[:300]}"
        for worker in deployment.workers
        for line in worker.log().splitlines()
        if any(mark in line for mark in FETCH_MARKS)
    ]
    lines.append(f"the workers' {len(noted)} lines on offsets fetched again (last 20):")
    lines.extend(noted[-20:])
    return "\n".join(lines)


# What the fetch path logs when it fetches offsets again (stream.app.fetch, offsets).
FETCH_MARKS: Final = (
    "missing from the fetch",
    "dropped during a seek",
    "a loss averted",
    "again: redeliveries",
    "not fetched again",
)


@dataclass
class Verdict:
    """What a scenario came to (printed, and quoted in docs/reliability.md)."""

    sessions: int
    events: int
    unreadable: int
    messages: int
    dead_letter_records: int
    faulted_sessions: int
    converge_seconds: float

    def line(self) -> str:
        return (
            f"{self.messages} messages, {self.events} events + {self.unreadable} unreadable,"
            f" {self.sessions} sessions ({self.faulted_sessions} with faults),"
            f" {self.dead_letter_records} dead-letter records;"
            f" converged {self.converge_seconds:.1f} s after the last fault/produce"
        )


def _diff(name: str, expected: dict[str, Any], found: dict[str, Any]) -> str:
    wrong = [s for s in expected if found.get(s) != expected[s]]
    extra = sorted(set(found) - set(expected))
    lines = [f"{name}: {len(wrong)} of {len(expected)} sessions differ, {len(extra)} extra"]
    for s in wrong[:3]:
        lines.append(f"  {s!r}\n    expected {expected[s]}\n    found    {found.get(s)}")
    lines.extend(f"  extra {s!r}: {found[s]}" for s in extra[:3])
    return "\n".join(lines)


def verify(
    deployment: Deployment,
    ledger: Ledger,
    workdir: Path,
    *,
    clean: Iterable[str] = (),
    timeout: float = 300,
) -> Verdict:
    """The one verifier: everything produced is accounted for, exactly, everywhere.

    1. The offline fold of what was produced is the truth for every session.
    2. No stall: every input partition's committed offset reaches its end (lag 0).
    3. The totals in Redis add up to exactly the events produced plus the unreadable
       parts, and by outcome equal the offline fold's (dead_lettered: the unreadable).
    4. Redis holds the offline fold line for every session, and no other session.
    5. The output topic's latest update of every session is that line, and no other key.
    6. The dead-letter topic holds one letter per input record with unreadable parts, and
       each says how many and which (``expected_letters``; a redelivery may send one
       again, the same).
    7. Sessions given only valid events (``clean``) have no faults.
    """
    started = time.monotonic()
    assert not ledger.failed, f"delivery failed: {ledger.failed[:3]}"
    logs = workdir / f"ledger-{deployment.name}"
    ledger.write_logs(logs)
    expected = offline_fold([logs])  # the directory: a soak writes 40,000 logs
    counts = offline_counts([logs])
    assert set(expected) == set(ledger.logs), "the offline fold lost a session"
    for session in clean:
        if session in expected:
            assert "faults" not in expected[session], (session, expected[session])
    assert sum(counts.values()) == ledger.events
    want = counts | {"dead_lettered": ledger.unreadable}
    sessions = sorted(expected)

    live = [w for w in deployment.workers if alive(w)]
    if not live and deployment.workers:
        assert_alive(deployment.workers[-1])  # raises, with how it died
    assert live, "no worker is running"

    def caught_up() -> bool:
        return all(v == 0 for v in consumer_lag(deployment).values())

    wait_live(live, caught_up, timeout, "every input partition's lag to reach 0", every=1.0)
    try:
        wait_live(
            live,
            lambda: deployment.accounted() >= ledger.total,
            timeout,
            f"{ledger.total} events and unreadable parts accounted for",
            every=0.5,
        )
    except AssertionError as error:
        if "died" in str(error):
            raise
        # Consumed and committed, yet not accounted for: say which sessions fell short.
        raise AssertionError(f"{error}\n{shortfall(deployment, ledger)}") from None
    # Redis is a cache written after Kafka: give a queue being worked off a moment (up to
    # 60 s, but not once nothing has moved for 5 s).
    deadline = time.monotonic() + 60
    last: Any = None
    still = time.monotonic()
    while True:
        stats = deployment.stats()
        found = redis_updates(deployment, sessions)
        if stats == want and found == expected:
            break
        now = time.monotonic()
        if (stats, found) != last:
            last, still = (stats, found), now
        if now > deadline or now - still > 5:
            break
        time.sleep(0.5)
    converged = time.monotonic() - started
    for worker in live:
        assert_alive(worker)
    assert stats == want, f"totals {stats}, expected {want}"
    assert found == expected, _diff("redis", expected, found)
    tallies = {_str(k) for k in deployment.redis().hkeys(f"{deployment.prefix}tallies")}
    assert tallies == set(sessions), f"redis tallies for {sorted(tallies - set(sessions))[:3]}"
    latest = latest_output(deployment)
    assert latest == expected, _diff("output topic", expected, latest)
    letters = dead_letters(deployment)
    found_parts = letter_parts(deployment, letters)
    expected_parts = expected_letters(ledger.dead_expected)
    missing = sorted(set(expected_parts) - set(found_parts))
    extra = sorted(set(found_parts) - set(expected_parts))
    wrong = [
        (place, expected_parts[place], found_parts[place])
        for place in sorted(set(expected_parts) & set(found_parts))
        if found_parts[place] != expected_parts[place]
    ]
    assert not missing and not extra and not wrong, (
        f"dead letters: {len(missing)} missing {missing[:5]}, {len(extra)} unexpected"
        f" {extra[:5]}, {len(wrong)} with other parts (place, expected, found) {wrong[:3]}"
    )
    assert sum(count for count, _ in found_parts.values()) == ledger.unreadable
    faulted = sum(1 for line in expected.values() if "faults" in line)
    return Verdict(
        len(sessions),
        ledger.events,
        ledger.unreadable,
        ledger.messages,
        len(letters),
        faulted,
        converged,
    )


# ----------------------------------------------------- the pure core's fold of a whole topic


@dataclass
class PureFold:
    """What the pure core makes of every record of the input topic, each partition folded
    in offset order as one batch: the latest update of every session, and the totals."""

    updates: dict[str, Any]
    totals: dict[str, int]
    faulted_sessions: int
    records: int
    resets: int


def pure_fold_of_topic(
    deployment: Deployment,
    limits: Any = None,
    claimed: Callable[[int, int], tuple[tuple[int, int], ...]] | None = None,
) -> PureFold:
    """The model a hostile run is checked against, read back from the topic itself (so
    records written by ``stream produce --reset`` are in it too).

    ``claimed``:
    the generations claimed for resets when the worker folded the record at (partition,
    offset), where resets are checked against them; each partition is folded in runs of
    the same claims, the rows carried from run to run."""
    from stream.session.batch import PARTITION_KEY, fold_batch
    from stream.session.batch import Limits as CoreLimits
    from stream.session.batch import Message as CoreMessage

    records = deployment.consume_all(input_topic(deployment), timeout=120)
    by_partition: dict[int, list[Any]] = {}
    for record in records:
        by_partition.setdefault(record.partition(), []).append(record)
    updates: dict[str, Any] = {}
    totals = dict.fromkeys(("folded", "duplicate", "faulted", "dead_lettered"), 0)
    faulted = resets = 0
    for partition, found in sorted(by_partition.items()):
        found.sort(key=lambda r: r.offset())
        messages = [
            CoreMessage(
                r.key(),
                r.value(),
                r.topic(),
                partition,
                r.offset(),
                [(name, value) for name, value in (r.headers() or [])],
            )
            for r in found
        ]
        base = limits or CoreLimits()
        runs: list[tuple[Any, list[Any]]] = []
        for message in messages:
            at = (
                base
                if claimed is None
                else replace(base, reset_generations=claimed(partition, message.offset))
            )
            if runs and runs[-1][0] == at:
                runs[-1][1].append(message)
            else:
                runs.append((at, [message]))
        rows: dict[tuple[int, bytes], bytes] = {}
        changes: dict[str, Any] = {}
        dead = 0
        for at, run in runs:
            result = fold_batch(run, lambda key, p, rows=rows: rows.get((p, key)), at)
            for change in result.sessions:
                rows[(change.partition, change.key)] = change.row
                changes[change.session_id] = change
            for part in result.partitions:
                rows[(part.partition, PARTITION_KEY)] = part.row
                dead = part.dead_lettered
            resets += sum(1 for note in result.resets if note.applied)
        for change in changes.values():
            updates[change.session_id] = change.update
            tally = change.tally
            totals["folded"] += tally.folded
            totals["duplicate"] += tally.duplicate
            totals["faulted"] += tally.faulted
            faulted += "faults" in change.update
        totals["dead_lettered"] += dead
    return PureFold(updates, totals, faulted, len(records), resets)
