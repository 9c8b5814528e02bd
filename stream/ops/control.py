"""The rebuild control record, and each worker's side of it: drop discarded local state.

One compacted, single-partition topic ``{STREAM_APP_ID}-control`` holds one record (key
``control``, JSON value), written with acks=all by ``stream replay --rebuild`` (or
``--new-generation``) and read by every worker before Faust starts (``prepare_state``):

- ``generation``: the rebuild generation. A worker writes to Redis with the larger of it
  and ``STREAM_GENERATION``, so rebuilt updates replace what is stored while a worker still
  on an older generation cannot move a UI backwards. Nobody edits STREAM_GENERATION by hand.
- ``epoch``: bumped whenever the table's changelog is truncated. A worker whose state
  directory recorded another epoch removes its local RocksDB copy of the table before Faust
  opens it; Faust would otherwise keep serving the discarded rows (it only reads the
  changelog past what the local copy already holds).
- ``rebuild``: the input offsets the last rebuild reset the group to, so repeating the same
  rebuild before any worker ran is recognised and changes nothing.
- ``resets``: the generations claimed for resets (``stream produce --reset``), as ascending
  ranges ``[first, last]``: a reset record on the input topic applies only under one of
  them. A record without it (an older release's) claims none.

Nothing on the topic is taken as it comes (``choose_control``, note 029): the first record
must be one step above where the deployment starts (``STREAM_GENERATION``, epoch 0, no
claims) or above what the worker's state directory last ran with, and each later one
exactly one step above the last; every operator writer moves exactly one step. The topic
must be compacted with one partition (``check_control_topic``), created keeping its whole
history (``min.compaction.lag.ms``), so a fresh worker can check every step.
"""

import logging
import os
import re
import shutil
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined,unused-ignore]
    AdminClient,
    ConfigResource,
    NewTopic,
)

from stream.config import Settings
from stream.environment import ConfigError
from stream.ops.admin import admin as admin_client
from stream.ops.topics import KEEP_HISTORY, TABLE, control_topic  # topics: their names

log = logging.getLogger("stream.control")

CONTROL_KEY = b"control"
MAX_NUMBER = 2**53 - 1  # generations and epochs: published in JSON, compared in Lua
EPOCH_FILE = "epoch"  # in STREAM_STATE_DIR: the epoch this directory's table state is from
GENERATION_FILE = "generation"  # in STREAM_STATE_DIR: the highest control generation seen
RESETS_FILE = "resets"  # in STREAM_STATE_DIR: the generations claimed for resets it ran with


# Generations claimed for resets: ascending, disjoint, inclusive ranges, merged where they
# touch, so the record stays small when claims follow one another (a loop of repairs).
Claimed = tuple[tuple[int, int], ...]


def add_claim(claims: Claimed, generation: int) -> Claimed:
    """``claims`` with ``generation`` (above all of them) claimed too."""
    if claims and claims[-1][1] == generation - 1:
        return (*claims[:-1], (claims[-1][0], generation))
    return (*claims, (generation, generation))


def describe_claims(claims: Claimed) -> str:
    """The last five ranges, for a reason or a log line (any shape a record held)."""

    def text(claim: tuple[int, ...]) -> str:
        single = len(claim) == 2 and claim[0] == claim[1]
        return str(claim[0]) if single else "-".join(map(str, claim))

    shown = ", ".join(map(text, claims[-5:]))
    return f"[{'..., ' if len(claims) > 5 else ''}{shown}]"[:200]


def _read_claims(value: Any) -> Claimed:
    """Ranges as JSON gives them (``[[2, 5], [8, 8]]``); raises ValueError or TypeError."""
    claims = tuple((first, last) for first, last in value or ())
    bound = 0  # a range starts past the one before it, and does not touch it
    for first, last in claims:
        if not (type(first) is int and type(last) is int and bound < first <= last):
            raise ValueError(f"bad claims for resets {value!r:.200}")
        bound = last + 1
    return claims


def _raw_claims(value: Any) -> Claimed:
    """Ranges as a record holds them, unchecked (C speed): a record carries every claim,
    so checking each one in every record would cost records x claims (seconds for a few
    thousand). ``step_problem`` compares them with what the step before allows, which is
    well formed by construction; anything else is refused there."""
    return cast(Claimed, tuple(map(tuple, value or ())))


class ControlTopicError(RuntimeError, ConfigError):
    """The control topic is not one a worker can trust (not compacted, several partitions):
    what keeps a worker from starting, and an operator command from writing, with the fix
    (a configuration error to the command line: one line, no traceback)."""


class ControlError(ValueError):
    """A control change that cannot be made as asked (a generation not above the current)."""


@dataclass(frozen=True, slots=True)
class Control:
    generation: int = 0  # 0: never rebuilt through the control topic
    epoch: int = 0
    rebuild: tuple[tuple[int, int], ...] = ()  # (input partition, offset) of the last rebuild
    topic: str = ""  # the input topic those offsets belong to
    resets: Claimed = ()  # generations claimed for resets
    written_at: str = ""
    written_by: str = ""

    def worker_generation(self, configured: int) -> int:
        """The generation a worker publishes with."""
        return max(configured, self.generation)

    def next_generation(self, configured: int, wanted: int | None = None) -> int:
        """The generation a rebuild or bump moves to: ``wanted``, or one above any in use
        (this record's and the configured ``STREAM_GENERATION``)."""
        floor = max(self.generation, configured)
        if wanted is None:
            return floor + 1
        if wanted <= floor:
            raise ControlError(f"generation {wanted} is not above {floor}, the one in use")
        if wanted > floor + 1:
            # Workers refuse a jump (choose_control): it would push every session past
            # what a later rebuild or reset could reach.
            raise ControlError(
                f"generation {wanted} jumps: a generation moves one step at a time, the next"
                f" is {floor + 1}"
            )
        return wanted

    def claimed_for_resets(self, configured: int) -> "Control":
        """The record ``stream produce --reset`` writes: the next generation, claimed for
        resets (a rebuild or a bare bump claims none)."""
        generation = self.next_generation(configured)
        return replace(self, generation=generation, resets=add_claim(self.resets, generation))

    def same_point(self, other: "Control") -> bool:
        """Whether both stand at the same step (who wrote it and when aside)."""
        return (self.generation, self.epoch, self.resets) == (
            other.generation,
            other.epoch,
            other.resets,
        )

    def after_rebuild(
        self,
        configured: int,
        topic: str,
        targets: Mapping[int, int],
        generation: int | None = None,
    ) -> "Control":
        """The record a rebuild writes: a generation above any in use, the next epoch."""
        return Control(
            generation=self.next_generation(configured, generation),
            epoch=self.epoch + 1,
            rebuild=tuple(sorted(targets.items())),
            topic=topic,
            resets=self.resets,
        )

    def stamped(self) -> "Control":
        """With when and where it is written, for the operator reading it later."""
        return replace(
            self,
            written_at=datetime.now(UTC).isoformat(timespec="seconds"),
            written_by=f"{socket.gethostname()}:{os.getpid()}",
        )

    def is_rebuild_to(self, topic: str, targets: Mapping[int, int]) -> bool:
        return self.topic == topic and self.rebuild == tuple(sorted(targets.items()))

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "generation": self.generation,
                "epoch": self.epoch,
                "rebuild": {"topic": self.topic, "offsets": {str(p): o for p, o in self.rebuild}},
                "resets": [list(claim) for claim in self.resets],
                "writtenAt": self.written_at,
                "writtenBy": self.written_by,
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> "Control":
        """Parse a control value; unknown fields are ignored (a newer writer may add some)."""
        try:
            value = orjson.loads(raw)
            rebuild = value.get("rebuild") or {}
            control = cls(
                generation=value.get("generation", 0),
                epoch=value.get("epoch", 0),
                rebuild=tuple(
                    sorted((int(p), o) for p, o in (rebuild.get("offsets") or {}).items())
                ),
                topic=rebuild.get("topic", ""),
                resets=_raw_claims(value.get("resets")),
                written_at=value.get("writtenAt", ""),
                written_by=value.get("writtenBy", ""),
            )
        except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError) as error:
            raise ValueError(f"unreadable control record {raw[:200]!r}: {error}") from None
        numbers = (
            control.generation,
            control.epoch,
            *(o for _, o in control.rebuild),
        )
        if not all(type(n) is int and 0 <= n <= MAX_NUMBER for n in numbers):
            raise ValueError(f"control record with a bad number: {raw[:200]!r}")
        return control


# -- the control topic ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ControlRead:
    """The control record in force, and every record refused on the way (said loudly)."""

    control: Control
    problems: tuple[str, ...] = ()


def step_problem(before: Control, after: Control, configured: int) -> str | None:
    """Why ``after`` is not exactly one step above ``before``; ``None`` when it is (pure).

    One step is what an operator writer makes: the generation one above any in use
    (``before``'s and ``configured``, the deployment's STREAM_GENERATION), the epoch the
    same or one above (a rebuild), and the claims for resets those before it plus, for a
    claim that moves no epoch, its own generation.
    """
    moves = (
        f"it moves generation {before.generation} -> {after.generation},"
        f" epoch {before.epoch} -> {after.epoch}"
    )
    following = max(before.generation, configured) + 1
    if after.generation < following - 1 or after.epoch < before.epoch:
        return f"{moves} backwards"
    if after.generation != following or after.epoch > before.epoch + 1:
        return f"{moves}: not one step (the next generation is {following})"
    claimed = after.resets != before.resets
    if claimed and after.resets != add_claim(before.resets, after.generation):
        return (
            f"its claims for resets {describe_claims(after.resets)} are not"
            f" {describe_claims(before.resets)} and at most its own generation"
        )
    if claimed and after.epoch != before.epoch:
        return "a rebuild cannot claim its generation for resets"
    return None


def choose_control(
    records: Sequence[tuple[int, bytes | None, bytes | None]],
    configured: int = 1,
    known: Control | None = None,
) -> ControlRead:
    """The control record in force among ``(offset, key, value)`` in topic order (pure).

    Nothing is taken as it comes. The walk starts from the deployment's base (generation
    ``configured``, epoch 0, no claims), or, when the topic's first readable record is not
    one step above that (its history compacted away, or a topic recreated), from
    ``known``: the point the worker's state directory last ran with, whose own record
    and those below it are history already checked. From there each record taken is
    exactly one step above the last (``step_problem``); a garbage value, a tombstone,
    another key, a record going backwards, jumping or changing the claims is refused with
    a reason, and the last good record stays in force (``Control()`` when none: the
    deployment's base). The problems are those after the record in force: writing a good
    record (any ``stream replay --new-generation``) supersedes what was refused before.
    """
    read: list[tuple[str, Control | str]] = []
    for offset, key, value in records:
        where = f"offset {offset}"
        if key != CONTROL_KEY:
            read.append((where, f"a record under key {key!r:.60} ignored"))
        elif value is None:
            read.append((where, "a tombstone ignored (the generation never goes back)"))
        else:
            try:
                read.append((where, Control.decode(value)))
            except ValueError as error:
                read.append((where, str(error)))
    base = Control(generation=configured)
    first = next((c for _, c in read if isinstance(c, Control)), None)
    # Where the walk stands (the last record taken, or where it starts); what is in force.
    position, control = base, Control()
    history = False  # from ``known``: the records below it are behind this worker
    if known is not None and first is not None and step_problem(base, first, configured):
        position, control, history = known, known, True
    taken = False
    problems: list[str] = []
    for where, candidate in read:
        if isinstance(candidate, str):
            problems.append(f"{where}: {candidate}"[:400])
            continue
        if history and not taken:
            if candidate.generation < position.generation:
                continue  # before the state directory's own record: checked when it was taken
            if candidate.same_point(position):
                control, taken = candidate, True
                problems.clear()
                continue
        reason = step_problem(position, candidate, configured)
        if reason is not None:
            problems.append(f"{where}: refused, {reason}"[:400])
            continue
        control = position = candidate
        taken = True
        problems.clear()
    return ControlRead(control, tuple(problems))


def check_control_topic(admin: AdminClient, topic: str, timeout: float = 20.0) -> bool:
    """Whether ``topic`` exists; raises ``ControlTopicError`` when it is not compacted or
    has more than one partition. A topic a broker created on a producer's first write
    (``auto.create.topics.enable``) has neither, and whoever wrote first chose its records."""
    # Listing every topic (no name) never auto-creates the one we look for.
    metadata = admin.list_topics(timeout=timeout).topics.get(topic)
    if metadata is None:
        return False
    resource = ConfigResource("topic", topic)
    try:
        described = admin.describe_configs([resource], request_timeout=timeout)[resource].result()
    except KafkaException as error:
        if error.args[0].code() != KafkaError.TOPIC_AUTHORIZATION_FAILED:
            raise
        raise ControlTopicError(
            f"{topic}: this principal may not DESCRIBE_CONFIGS it, so whether it is compacted"
            " cannot be checked; grant it DESCRIBE_CONFIGS on the control topic"
            ' (docs/deploy.md, "Kafka ACLs")'
        ) from None
    policy = described["cleanup.policy"].value
    partitions = len(metadata.partitions)
    if policy == "compact" and partitions == 1:
        return True
    raise ControlTopicError(
        f"{topic} is not a control topic a worker can trust: cleanup.policy={policy},"
        f" {partitions} partition(s), where it must be compact with 1 (a topic a broker"
        " auto-created on a first write has its defaults, and records nobody checked)."
        f" Delete it (`kafka-topics.sh --delete --topic {topic}`) and create it again with"
        " `stream topics --create` (an admin's principal); workers that published above"
        " STREAM_GENERATION need it set to that generation first (docs/operations.md)"
    )


def read_control_log(
    settings: Settings, timeout: float = 20.0, known: Control | None = None
) -> ControlRead:
    """Every record of the control topic, and the one in force (``choose_control``) for a
    reader that last ran with ``known`` (a worker: its state directory's). Raises
    ``ControlTopicError`` for a topic that cannot be trusted (``check_control_topic``)."""
    topic = control_topic(settings)
    if not check_control_topic(admin_client(settings), topic, timeout):
        return ControlRead(Control())
    consumer = Consumer(
        settings.librdkafka()
        | {
            # The workers' own group, on which they hold READ: assigned, this consumer sends
            # only FindCoordinator (DESCRIBE), never JoinGroup, OffsetFetch or OffsetCommit,
            # and librdkafka requires a group.id (docs/notes/026-least-privilege.md).
            "group.id": settings.app_id,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "log_level": 2,
        }
    )
    records: list[tuple[int, bytes | None, bytes | None]] = []
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout)
        if high <= low:
            return ControlRead(Control())
        consumer.assign([TopicPartition(topic, 0, low)])
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"reading {topic} took over {timeout:.0f} s")
            message = consumer.poll(min(left, 1.0))
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    break
                raise KafkaException(error)
            records.append((message.offset() or 0, message.key(), message.value()))
            if (message.offset() or 0) >= high - 1:
                break
    finally:
        consumer.close()
    return choose_control(records, settings.generation, known)


def worker_control_log(settings: Settings, timeout: float = 20.0) -> ControlRead:
    """``read_control_log`` from where the worker's state directory last stood."""
    return read_control_log(settings, timeout, local_control(Path(settings.state_dir)))


def read_control(settings: Settings, timeout: float = 20.0) -> Control:
    """The control record in force; ``Control()`` when none was ever written."""
    found = read_control_log(settings, timeout)
    for problem in found.problems:
        log.warning("%s: %s", control_topic(settings), problem)
    return found.control


def ensure_control_topic(settings: Settings, admin: AdminClient, timeout: float = 20.0) -> None:
    """Create the control topic (compacted, one partition, its history kept) unless it
    exists; raises ``ControlTopicError`` for one that exists but cannot be trusted: no
    operator writes a step nobody will take."""
    topic = control_topic(settings)
    if check_control_topic(admin, topic, timeout):
        return
    config = {"cleanup.policy": "compact", "min.compaction.lag.ms": KEEP_HISTORY}
    new = NewTopic(topic, 1, settings.replication_factor, config=config)
    try:
        admin.create_topics([new], request_timeout=timeout)[topic].result()
    except KafkaException as error:
        if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def write_control(settings: Settings, control: Control, timeout: float = 30.0) -> None:
    """Store ``control`` durably (acks=all, idempotent); raises when not acknowledged."""
    ensure_control_topic(settings, admin_client(settings), timeout)
    failures: list[str] = []

    def delivered(error: KafkaError | None, _message: Any) -> None:
        if error is not None:
            failures.append(error.str())

    producer = Producer(
        settings.librdkafka() | {"acks": "all", "enable.idempotence": True, "log_level": 2}
    )
    producer.produce(
        control_topic(settings),
        key=CONTROL_KEY,
        value=control.stamped().encode(),
        on_delivery=delivered,
    )
    if producer.flush(timeout) or failures:
        raise RuntimeError(
            f"control record not acknowledged by {settings.bootstrap_servers}: "
            + ("; ".join(failures) or f"still in flight after {timeout:.0f} s")
        )


# -- the worker's side: prepare_state ---------------------------------------------------

_TABLE_FILE = re.compile(rf"{re.escape(TABLE)}-(\d+\.db|backups)")


def local_table_paths(state_dir: Path) -> list[Path]:
    """The table's local RocksDB data: ``{state_dir}/v{version}/tables/sessions-{p}.db``
    (one per partition, standbys included) and Faust's ``sessions-backups``."""
    return sorted(
        path
        for path in state_dir.glob("v*/tables/*")
        if _TABLE_FILE.fullmatch(path.name) and path.parent.parent.name[1:].isdigit()
    )


def local_epoch(state_dir: Path) -> int:
    """The epoch recorded in a state directory; 0 when none (never rebuilt)."""
    try:
        return int((state_dir / EPOCH_FILE).read_text().strip())
    except FileNotFoundError:
        return 0
    except ValueError:
        return -1  # unreadable: matches no epoch, so the state is dropped and rewritten


def local_generation(state_dir: Path) -> int:
    """The highest control generation this state directory ran with; 0 when none."""
    try:
        return max(0, int((state_dir / GENERATION_FILE).read_text().strip()))
    except (FileNotFoundError, ValueError):
        return 0


def local_resets(state_dir: Path) -> Claimed:
    """The generations claimed for resets this state directory ran with; () when none."""
    try:
        return _read_claims(orjson.loads((state_dir / RESETS_FILE).read_bytes()))
    except (FileNotFoundError, orjson.JSONDecodeError, TypeError, ValueError):
        return ()


def local_control(state_dir: Path) -> Control | None:
    """The step this state directory last ran with (``None``: it never took a record)."""
    generation = local_generation(state_dir)
    if not generation:
        return None
    return Control(generation, max(0, local_epoch(state_dir)), resets=local_resets(state_dir))


def _record(state_dir: Path, name: str, value: int | Claimed) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    temporary = state_dir / f".{name}.tmp"
    text = orjson.dumps(value).decode() if isinstance(value, tuple) else str(value)
    temporary.write_text(f"{text}\n")
    temporary.replace(state_dir / name)  # atomic: a crash leaves the old value


def _record_epoch(state_dir: Path, epoch: int) -> None:
    _record(state_dir, EPOCH_FILE, epoch)


def prepare_state(
    settings: Settings, read: Callable[[Settings], ControlRead] = worker_control_log
) -> ControlRead:
    """Call before Faust starts: drop the local table state when a rebuild discarded it.

    Compares the control record's epoch with ``{STREAM_STATE_DIR}/epoch``; when they
    differ, removes the table's local RocksDB data (Faust then restores what the changelog
    still holds) and records the new epoch. Dropping is always safe, only slower to start.
    Returns the control record in force and the records refused (``choose_control``,
    from where this state directory last stood); a generation below the one it last ran
    with is refused too (a topic recreated, or a state directory from elsewhere). Publish
    with ``control.worker_generation(settings.generation)``. Raises ``RuntimeError`` (with
    the reason) when the topic cannot be read or the state cannot be removed: starting on
    discarded state would publish stale rows.
    """
    try:
        found = read(settings)
    except ControlTopicError:
        raise  # its own message names the fix
    except (KafkaException, TimeoutError, ValueError) as error:
        raise RuntimeError(f"cannot read {control_topic(settings)}: {error}") from None
    control, problems = found.control, list(found.problems)
    state_dir = Path(settings.state_dir)
    floor = local_generation(state_dir)
    if control.generation < floor:
        problems.append(
            f"generation {control.generation} is below {floor}, the one this state directory"
            f" last ran with: kept {floor}"
        )
        control = replace(control, generation=floor)
    for problem in problems:
        log.error("%s: %s", control_topic(settings), problem)
    recorded = local_epoch(state_dir)
    if recorded != control.epoch:
        dropped = local_table_paths(state_dir)
        try:
            for path in dropped:
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()
            _record_epoch(state_dir, control.epoch)
        except OSError as error:
            raise RuntimeError(f"cannot drop the local table state: {error}") from None
        log.warning(
            "state epoch %d (local %d): dropped local table state (%d paths under %s)",
            control.epoch,
            recorded,
            len(dropped),
            state_dir,
        )
    if control.generation > floor:
        _record(state_dir, GENERATION_FILE, control.generation)
    if control.resets != local_resets(state_dir):
        _record(state_dir, RESETS_FILE, control.resets)
    return ControlRead(control, tuple(problems))


def worker_settings(settings: Settings) -> tuple[Settings, tuple[str, ...]]:
    """The settings a worker runs with: its local state checked against the control
    record's epoch (``prepare_state``) and the rebuild generation taken from it, so nobody
    edits ``STREAM_GENERATION`` by hand; and the control records refused on the way (the
    worker reports them: log, metric, ``/readyz``). Raises ``RuntimeError`` like
    ``prepare_state``."""
    found = prepare_state(settings)
    generation = found.control.worker_generation(settings.generation)
    return replace(settings, generation=generation), found.problems


def claim_generation(settings: Settings) -> int:
    """Move the control record's generation one above any in use, claimed for resets, and
    return it: what a ``stream produce --reset`` writes its sessions under (a worker takes
    a reset only under a generation so claimed), so a later rebuild (which moves above it
    again) can never publish below them."""
    following = read_control(settings).claimed_for_resets(settings.generation)
    write_control(settings, following.stamped())
    return following.generation
