"""The control record, the rebuild plan and the worker's ``prepare_state`` (no broker)."""

import asyncio
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest
from confluent_kafka import KafkaError, KafkaException

from stream.config import Settings
from stream.ops.control import (
    CONTROL_KEY,
    EPOCH_FILE,
    Control,
    ControlError,
    ControlRead,
    ControlTopicError,
    check_control_topic,
    choose_control,
    local_control,
    local_epoch,
    local_table_paths,
    prepare_state,
    step_problem,
)
from stream.ops.offsets import Earliest, PartitionOffsets, plan_reset
from stream.ops.rebuild import ChangelogPartition, plan_generation, plan_rebuild
from stream.ops.topics import TABLE, changelog_topic, control_topic


def test_the_worker_s_table_has_the_changelog_the_control_module_names() -> None:
    """The worker's table and the rebuild plan agree on the changelog topic: the table
    Faust builds is asked its name (imported here: the app module imports faust)."""
    import faust

    from stream.app.table import SessionTable

    loop = asyncio.new_event_loop()
    try:
        app = faust.App("ctx", broker="kafka://x:1", loop=loop)
        table = SessionTable(app, partitions=4)
    finally:
        loop.close()
    assert table.changelog == changelog_topic(Settings(app_id="ctx")) == f"ctx-{TABLE}-changelog"


def test_topic_names() -> None:
    settings = Settings(app_id="ctx")
    assert control_topic(settings) == "ctx-control"
    assert changelog_topic(settings) == "ctx-sessions-changelog"


def test_control_round_trips_and_ignores_unknown_fields() -> None:
    control = Control(3, 7, ((0, 0), (2, 15)), "events", resets=((2, 3),)).stamped()
    assert Control.decode(control.encode()) == control
    value = orjson.loads(control.encode()) | {"newerField": {"x": 1}}
    assert Control.decode(orjson.dumps(value)) == control
    assert Control.decode(b"{}") == Control()
    # An older release's record claims no generation for resets.
    assert Control.decode(b'{"generation": 4, "epoch": 1}') == Control(4, 1)


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        b'{"generation": "2"}',
        b'{"epoch": -1}',
        b'{"generation": 1.5}',
        b'{"rebuild": {"offsets": {"x": 1}}}',
        b'{"rebuild": {"offsets": {"0": true}}}',
        b'{"generation": 3, "resets": [3]}',
        b'{"generation": 3, "resets": 3}',
    ],
)
def test_unreadable_control_records_are_refused(raw: bytes) -> None:
    with pytest.raises(ValueError):
        Control.decode(raw)


def test_worker_generation_never_goes_below_the_configured_one() -> None:
    assert Control(generation=0).worker_generation(1) == 1
    assert Control(generation=4).worker_generation(1) == 4
    assert Control(generation=4).worker_generation(6) == 6  # an old hand-bumped setting


def test_a_rebuild_moves_generation_above_anything_in_use_and_bumps_the_epoch() -> None:
    after = Control(generation=2, epoch=5).after_rebuild(3, "events", {1: 0, 0: 10})
    assert (after.generation, after.epoch, after.rebuild) == (4, 6, ((0, 10), (1, 0)))
    assert after.is_rebuild_to("events", {0: 10, 1: 0})
    assert not after.is_rebuild_to("events", {0: 0, 1: 0})
    assert not after.is_rebuild_to("other", {0: 10, 1: 0})


OFFSETS = [PartitionOffsets(0, 0, 100, 100), PartitionOffsets(1, 0, 40, 40)]


def test_rebuild_plan_then_its_repetition_is_a_no_op() -> None:
    reset = plan_reset(OFFSETS, Earliest(), group="g", topic="events")
    changelog = [ChangelogPartition(0, 0, 12), ChangelogPartition(1, 3, 9)]
    first = plan_rebuild(Control(), reset, changelog, 1)
    assert first.next is not None and first.dropped == 18
    assert (first.next.generation, first.next.epoch) == (2, 1)
    # Applied: offsets at the targets, changelog empty, the record written.
    done = [PartitionOffsets(p.partition, p.low, p.high, p.target) for p in reset.partitions]
    again = plan_reset(done, Earliest(), group="g", topic="events")
    empty = [ChangelogPartition(0, 12, 12), ChangelogPartition(1, 9, 9)]
    assert plan_rebuild(first.next, again, empty, 1).next is None


def test_an_interrupted_rebuild_is_not_taken_for_a_finished_one() -> None:
    reset = plan_reset(OFFSETS, Earliest(), group="g", topic="events")
    done = [PartitionOffsets(p.partition, p.low, p.high, p.target) for p in reset.partitions]
    again = plan_reset(done, Earliest(), group="g", topic="events")
    empty = [ChangelogPartition(0, 12, 12)]
    # Offsets moved but the control record was never written: finish it.
    assert plan_rebuild(Control(generation=2, epoch=1), again, empty, 1).next is not None
    # Record written but the changelog not yet truncated: finish it.
    written = Control().after_rebuild(1, "events", again.targets())
    held = [ChangelogPartition(0, 0, 12)]
    assert plan_rebuild(written, again, held, 1).next is not None


def _table_state(root: Path, version: str = "v1") -> list[Path]:
    tables = root / version / "tables"
    made = [tables / "sessions-0.db", tables / "sessions-11.db", tables / "sessions-backups"]
    for path in made:
        (path / "data").mkdir(parents=True)
    (tables / "other-0.db").mkdir()  # another table: not ours
    (root / "keep.txt").write_text("x")
    return made


def test_local_table_paths_are_the_tables_rocksdb_directories(tmp_path: Path) -> None:
    made = _table_state(tmp_path) + _table_state(tmp_path / "x", "v2")
    assert local_table_paths(tmp_path) == sorted(made[:3])


def _prepare(tmp_path: Path, control: Control) -> Control:
    found = prepare_state(Settings(state_dir=str(tmp_path)), read=lambda _: ControlRead(control))
    return found.control


def test_prepare_state_drops_local_state_when_the_epoch_moved(tmp_path: Path) -> None:
    made = _table_state(tmp_path)
    assert local_epoch(tmp_path) == 0
    assert _prepare(tmp_path, Control(generation=2, epoch=1)) == Control(generation=2, epoch=1)
    assert not any(p.exists() for p in made)
    assert (tmp_path / "v1" / "tables" / "other-0.db").exists()
    assert (tmp_path / EPOCH_FILE).read_text() == "1\n"
    # Same epoch again (a restart): nothing is dropped.
    again = _table_state(tmp_path / "again")
    _prepare(tmp_path / "again", Control(epoch=0))
    assert all(p.exists() for p in again)


def test_prepare_state_keeps_state_on_a_restart(tmp_path: Path) -> None:
    _prepare(tmp_path, Control(epoch=3))
    made = _table_state(tmp_path)
    _prepare(tmp_path, Control(epoch=3))
    assert all(p.exists() for p in made)


def test_an_unreadable_epoch_file_means_drop(tmp_path: Path) -> None:
    made = _table_state(tmp_path)
    (tmp_path / EPOCH_FILE).write_text("garbage")
    _prepare(tmp_path, Control(epoch=0))
    assert not any(p.exists() for p in made)
    assert local_epoch(tmp_path) == 0


def test_prepare_state_reports_a_control_topic_it_cannot_read(tmp_path: Path) -> None:
    def broken(_: Settings) -> ControlRead:
        raise TimeoutError("reading took over 20 s")

    with pytest.raises(RuntimeError, match="ctx-control: reading took"):
        prepare_state(Settings(app_id="ctx", state_dir=str(tmp_path)), read=broken)


MAX = 2**53 - 1


def _records(*values: Control | bytes | None) -> list[tuple[int, bytes | None, bytes | None]]:
    return [
        (n, CONTROL_KEY, v.encode() if isinstance(v, Control) else v) for n, v in enumerate(values)
    ]


# Every operator writer moves exactly one step: a rebuild (generation and epoch), a bare bump
# (generation), a claim for resets (generation, claimed).
@pytest.mark.parametrize(
    ("values", "configured", "in_force"),
    [
        ((), 1, Control()),
        ((Control(2, 1),), 1, Control(2, 1)),  # the first rebuild
        ((Control(2, 0),), 1, Control(2, 0)),  # the first `--new-generation`
        ((Control(2, 0, resets=((2, 2),)),), 1, Control(2, 0, resets=((2, 2),))),  # the first claim
        ((Control(6, 1),), 5, Control(6, 1)),  # above STREAM_GENERATION=5
        (
            (
                Control(2, 1),
                Control(3, 1, resets=((3, 3),)),
                Control(4, 2, resets=((3, 3),)),
                Control(5, 2, resets=((3, 3),)),
            ),
            1,
            Control(5, 2, resets=((3, 3),)),  # a claim carried through a rebuild and a bump
        ),
    ],
)
def test_a_chain_of_single_steps_from_the_deployments_base_is_taken(
    values: tuple[Control, ...], configured: int, in_force: Control
) -> None:
    found = choose_control(_records(*values), configured)
    assert found.problems == ()
    assert found.control.same_point(in_force)
    if values:
        assert found.control.resets == values[-1].resets


@pytest.mark.parametrize(
    ("first", "configured", "reason"),
    [
        (b'{"generation": 9007199254740991}', 1, "generation 1 -> 9007199254740991"),
        (Control(MAX, MAX), 1, "not one step (the next generation is 2)"),
        (Control(2, MAX), 1, "epoch 0 -> 9007199254740991: not one step"),
        (Control(2, 2), 1, "epoch 0 -> 2: not one step"),
        (Control(3, 1), 1, "generation 1 -> 3, epoch 0 -> 1: not one step"),
        (Control(1, 1), 1, "generation 1 -> 1, epoch 0 -> 1: not one step"),
        (Control(2, 1), 5, "generation 5 -> 2, epoch 0 -> 1 backwards"),
        (Control(2, 0, resets=((1, 1),)), 1, "claims for resets [1] are not []"),  # the base
        (Control(2, 1, resets=((2, 2),)), 1, "a rebuild cannot claim"),
    ],
)
def test_a_forged_first_record_is_refused_and_the_deployments_base_stays(
    first: Control | bytes, configured: int, reason: str
) -> None:
    found = choose_control(_records(first), configured)
    assert found.control == Control()
    (problem,) = found.problems
    assert problem.startswith("offset 0: refused") and reason in problem, problem
    # The operator's next step is taken after it, and clears the problem.
    step = choose_control(_records(first, Control(configured + 1, 1)), configured)
    assert (step.control.generation, step.problems) == (configured + 1, ())


GOOD = Control(generation=3, epoch=1)


@pytest.mark.parametrize(
    ("after", "reason"),
    [
        (b"{garbage", "offset 2: unreadable"),
        (None, "offset 2: a tombstone ignored"),
        (Control(2, 1), "moves generation 3 -> 2, epoch 1 -> 1 backwards"),
        (Control(4, 0), "epoch 1 -> 0 backwards"),
        (Control(3, 1), "generation 3 -> 3, epoch 1 -> 1: not one step"),  # again
        (Control(5, 1), "generation 3 -> 5, epoch 1 -> 1: not one step"),
        (Control(MAX, 1), "not one step (the next generation is 4)"),
        (Control(4, 3), "epoch 1 -> 3: not one step"),
        (Control(4, 1, resets=((2, 2),)), "claims for resets [2] are not []"),
        (Control(4, 1, resets=((3, 4),)), "claims for resets [3-4] are not []"),
        (b'{"generation": 18446744073709551616}', "bad number"),
        # Claims are compared with what the step allows, whatever their shape.
        (b'{"generation": 4, "epoch": 1, "resets": [[4, 4], [4, 4]]}', "[4, 4] are not []"),
        (b'{"generation": 4, "epoch": 1, "resets": [[5, 5]]}', "claims for resets [5] are not"),
        (b'{"generation": 4, "epoch": 1, "resets": [[1, 9007199254740991]]}', "[1-9007"),
        (b'{"generation": 4, "epoch": 1, "resets": [[0, 4]]}', "claims for resets [0-4]"),
        (b'{"generation": 4, "epoch": 1, "resets": [["4", "4"]]}', "claims for resets [4]"),
        (b'{"generation": 4, "epoch": 1, "resets": [[4, 4, 4]]}', "claims for resets [4-4-4]"),
        (b'{"generation": 4, "epoch": 1, "resets": ["ab"]}', "claims for resets [a-b]"),
    ],
)
def test_a_bad_control_record_is_refused_loudly_and_the_good_one_stays_in_force(
    after: Control | bytes | None, reason: str
) -> None:
    records = _records(Control(2, 1), GOOD, after)
    found = choose_control(records)
    assert found.control.same_point(GOOD)
    (problem,) = found.problems
    assert reason in problem, problem
    other = choose_control([*_records(Control(2, 1), GOOD), (2, b"other", b"{}")])
    assert "under key b'other' ignored" in other.problems[0]


def test_claims_for_resets_are_only_ever_added_by_their_own_step() -> None:
    claimed = Control(2, 0, resets=((2, 2),))
    dropped = choose_control(_records(claimed, Control(3, 0)))
    assert dropped.control.same_point(claimed)
    assert "claims for resets [] are not [2]" in dropped.problems[0]
    kept = choose_control(_records(claimed, Control(3, 1, resets=((2, 2),))))
    assert kept.problems == () and kept.control.resets == ((2, 2),)


def test_a_history_compacted_away_is_bridged_by_the_state_directory_only() -> None:
    latest = Control(7, 3, resets=((5, 5),))
    # A fresh reader cannot check the first retained record: refused.
    assert choose_control(_records(latest)).control == Control()
    # A worker that ran with it, or with the step before it, can.
    for known in (latest, Control(6, 3, resets=((5, 5),)), Control(6, 2, resets=((5, 5),))):
        found = choose_control(_records(latest), known=known)
        assert found.control.same_point(latest) and found.problems == (), known
    # One further back, a step is missing: refused, and the worker keeps its own.
    behind = Control(5, 2, resets=((5, 5),))
    found = choose_control(_records(latest), known=behind)
    assert found.control.same_point(behind)
    assert "generation 5 -> 7, epoch 2 -> 3: not one step" in found.problems[0]
    # Same generation and epoch, other claims: not the record the worker ran with.
    found = choose_control(_records(Control(7, 3, resets=((5, 5), (7, 7)))), known=latest)
    assert found.control.same_point(latest) and "not one step" in found.problems[0]


def test_records_below_the_state_directorys_own_are_history() -> None:
    records = _records(Control(5, 2), Control(6, 2), Control(7, 3))
    found = choose_control(records, known=Control(6, 2))
    assert found.control.same_point(Control(7, 3)) and found.problems == ()
    # A backwards record after the one in force is still refused.
    found = choose_control(
        [*records, (3, CONTROL_KEY, Control(5, 3).encode())], known=Control(6, 2)
    )
    assert found.control.same_point(Control(7, 3)) and "backwards" in found.problems[0]


def test_a_full_history_is_walked_from_the_base_whatever_the_state_directory_says() -> None:
    # A worker down through two rebuilds: every step is on the topic.
    records = _records(Control(2, 1), Control(3, 2), Control(4, 3))
    assert choose_control(records, known=Control(2, 1)).control.same_point(Control(4, 3))
    # A topic recreated above STREAM_GENERATION set to the generation in use (note 029).
    found = choose_control(_records(Control(7, 0)), 6, known=Control(6, 2, resets=((5, 5),)))
    assert found.control.same_point(Control(7, 0)) and found.problems == ()


def test_a_good_record_after_a_refused_one_supersedes_the_problem() -> None:
    later = Control(generation=4, epoch=1)
    found = choose_control(_records(Control(2, 1), GOOD, None, later))
    assert found.control.generation == 4 and found.problems == ()


def test_a_generation_below_what_the_state_directory_ran_with_is_kept_up(tmp_path: Path) -> None:
    assert _prepare(tmp_path, Control(generation=7)).generation == 7
    settings = Settings(state_dir=str(tmp_path))
    found = prepare_state(settings, read=lambda _: ControlRead(Control(generation=2)))
    assert found.control.generation == 7
    (problem,) = found.problems
    assert "generation 2 is below 7" in problem


def test_the_state_directory_records_the_step_it_runs_with(tmp_path: Path) -> None:
    assert local_control(tmp_path) is None
    _prepare(tmp_path, Control(4, 2, resets=((3, 4),)))
    assert local_control(tmp_path) == Control(4, 2, resets=((3, 4),))
    _prepare(tmp_path, Control(5, 3, resets=((3, 4),)))
    assert local_control(tmp_path) == Control(5, 3, resets=((3, 4),))


def test_claims_that_follow_one_another_are_one_range() -> None:
    control = Control()
    for _ in range(1000):  # a loop of `stream produce --reset`, one log each
        control = control.claimed_for_resets(1)
    assert control.resets == ((2, 1001),) and len(control.encode()) < 200
    rebuilt = control.after_rebuild(1, "events", {})
    assert rebuilt.claimed_for_resets(1).resets == ((2, 1001), (1003, 1003))


def test_a_claim_for_resets_is_the_next_step() -> None:
    current = Control(3, 2, resets=((2, 2),))
    claimed = current.claimed_for_resets(1)
    assert claimed == Control(4, 2, resets=((2, 2), (4, 4)))
    assert step_problem(current, claimed, 1) is None
    assert current.claimed_for_resets(9).resets == ((2, 2), (10, 10))  # above STREAM_GENERATION
    rebuilt = claimed.after_rebuild(1, "events", {0: 0})
    assert (rebuilt.generation, rebuilt.epoch, rebuilt.resets) == (5, 3, ((2, 2), (4, 4)))
    assert step_problem(claimed, rebuilt, 1) is None
    bumped = plan_generation(rebuilt, 1)
    assert bumped is not None and step_problem(rebuilt, bumped, 1) is None
    assert bumped.resets == ((2, 2), (4, 4))


def test_a_generation_bump_moves_only_the_generation() -> None:
    current = Control(generation=3, epoch=2, rebuild=((0, 5),), topic="events")
    bumped = plan_generation(current, 1)
    assert bumped == Control(generation=4, epoch=2, rebuild=((0, 5),), topic="events")
    assert plan_generation(current, 9) == Control(10, 2, ((0, 5),), "events")  # above the env's
    assert plan_generation(current, 1, generation=4) == Control(4, 2, ((0, 5),), "events")
    assert plan_generation(Control(generation=12), 1, generation=12) is None  # idempotent
    with pytest.raises(ControlError, match="not above 3"):
        plan_generation(current, 1, generation=3 - 1)
    with pytest.raises(ControlError, match="one step at a time, the next is 4"):
        plan_generation(current, 1, generation=12)


def test_a_rebuild_can_name_its_generation() -> None:
    reset = plan_reset(OFFSETS, Earliest(), group="g", topic="events")
    changelog = [ChangelogPartition(0, 0, 12)]
    planned = plan_rebuild(Control(generation=2), reset, changelog, 1, generation=3)
    assert planned.next is not None and planned.next.generation == 3
    with pytest.raises(ControlError, match="jumps"):
        plan_rebuild(Control(generation=2), reset, changelog, 1, generation=9)
    with pytest.raises(ControlError):
        plan_rebuild(Control(generation=2), reset, changelog, 1, generation=2)


class _Future:
    def __init__(self, value: object) -> None:
        self.value = value

    def result(self) -> object:
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


class _Admin:
    """What ``check_control_topic`` asks of an AdminClient: metadata and a topic's configs."""

    def __init__(self, partitions: int | None, policy: str | Exception) -> None:
        topic = SimpleNamespace(partitions=dict.fromkeys(range(partitions or 0)))
        self.topics = {} if partitions is None else {"ctx-control": topic}
        self.policy = policy

    def list_topics(self, timeout: float) -> SimpleNamespace:
        return SimpleNamespace(topics=self.topics)

    def describe_configs(self, resources: list[object], request_timeout: float) -> object:
        (resource,) = resources
        if isinstance(self.policy, Exception):
            return {resource: _Future(self.policy)}
        return {resource: _Future({"cleanup.policy": SimpleNamespace(value=self.policy)})}


def _check(partitions: int | None, policy: str | Exception = "compact") -> bool:
    return check_control_topic(_Admin(partitions, policy), "ctx-control")  # type: ignore[arg-type]


def test_only_a_compacted_control_topic_of_one_partition_is_read() -> None:
    assert _check(1) is True
    assert _check(None) is False  # none yet: nothing to read
    with pytest.raises(ControlTopicError, match=r"cleanup\.policy=delete, 1 partition") as auto:
        _check(1, "delete")  # what a broker's auto-creation makes
    assert "`stream topics --create`" in str(auto.value)
    with pytest.raises(ControlTopicError, match=r"cleanup\.policy=compact, 3 partition"):
        _check(3)
    with pytest.raises(ControlTopicError, match="compact,delete"):
        _check(1, "compact,delete")  # the record in force would expire
    denied = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    with pytest.raises(ControlTopicError, match="may not DESCRIBE_CONFIGS"):
        _check(1, denied)
