"""The control record, the rebuild plan and the worker's ``prepare_state`` (no broker)."""

from pathlib import Path

import orjson
import pytest

import stream
from stream.config import Settings
from stream.ops.control import (
    CONTROL_KEY,
    EPOCH_FILE,
    TABLE,
    ChangelogPartition,
    Control,
    ControlError,
    ControlRead,
    changelog_topic,
    choose_control,
    control_topic,
    local_epoch,
    local_table_paths,
    plan_generation,
    plan_rebuild,
    prepare_state,
)
from stream.ops.offsets import Earliest, PartitionOffsets, plan_reset


def test_the_table_takes_its_name_from_the_control_module() -> None:
    # Parsed, not imported: importing the app module imports faust. One name, one home.
    source = (Path(stream.__file__).parent / "app" / "table.py").read_text()
    assert "from stream.ops.control import TABLE" in source
    assert changelog_topic(Settings(app_id="ctx")) == f"ctx-{TABLE}-changelog"


def test_topic_names() -> None:
    settings = Settings(app_id="ctx")
    assert control_topic(settings) == "ctx-control"
    assert changelog_topic(settings) == "ctx-sessions-changelog"


def test_control_round_trips_and_ignores_unknown_fields() -> None:
    control = Control(3, 7, ((0, 0), (2, 15)), "events").stamped()
    assert Control.decode(control.encode()) == control
    value = orjson.loads(control.encode()) | {"newerField": {"x": 1}}
    assert Control.decode(orjson.dumps(value)) == control
    assert Control.decode(b"{}") == Control()


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


GOOD = Control(generation=3, epoch=1).encode()


@pytest.mark.parametrize(
    ("records", "reason"),
    [
        ([(0, CONTROL_KEY, GOOD), (1, CONTROL_KEY, b"{garbage")], "offset 1: unreadable"),
        ([(0, CONTROL_KEY, GOOD), (1, CONTROL_KEY, None)], "offset 1: a tombstone ignored"),
        (
            [(0, CONTROL_KEY, GOOD), (1, CONTROL_KEY, Control(generation=2, epoch=1).encode())],
            "moves generation 3 -> 2, epoch 1 -> 1 backwards",
        ),
        (
            [(0, CONTROL_KEY, GOOD), (1, CONTROL_KEY, Control(generation=4).encode())],
            "epoch 1 -> 0 backwards",
        ),
        (
            [(0, CONTROL_KEY, GOOD), (1, CONTROL_KEY, b'{"generation": 18446744073709551616}')],
            "bad number",
        ),
        ([(0, CONTROL_KEY, GOOD), (1, b"other", b"{}")], "under key b'other' ignored"),
    ],
)
def test_a_bad_control_record_is_refused_loudly_and_the_good_one_stays_in_force(
    records: list[tuple[int, bytes | None, bytes | None]], reason: str
) -> None:
    found = choose_control(records)
    assert (found.control.generation, found.control.epoch) == (3, 1)
    (problem,) = found.problems
    assert reason in problem


def test_one_step_counts_from_the_configured_generation_too() -> None:
    # A deployment that set STREAM_GENERATION=5 by hand rebuilds to 6 from a record at 1.
    records = [(0, CONTROL_KEY, Control(1, 1).encode()), (1, CONTROL_KEY, Control(6, 2).encode())]
    assert choose_control(records, configured=5).control == Control(6, 2)
    assert choose_control(records).problems != ()


def test_a_jump_compaction_left_alone_is_held_to_the_state_directory(tmp_path: Path) -> None:
    assert _prepare(tmp_path, Control(generation=2, epoch=1)).generation == 2
    assert _prepare(tmp_path, Control(generation=2**53 - 1, epoch=1)).generation == 2


def test_a_good_record_after_a_refused_one_supersedes_the_problem() -> None:
    later = Control(generation=4, epoch=1).encode()
    found = choose_control(
        [(0, CONTROL_KEY, GOOD), (1, CONTROL_KEY, None), (2, CONTROL_KEY, later)]
    )
    assert found.control.generation == 4 and found.problems == ()


def test_a_generation_below_what_the_state_directory_ran_with_is_kept_up(tmp_path: Path) -> None:
    assert _prepare(tmp_path, Control(generation=7)).generation == 7
    settings = Settings(state_dir=str(tmp_path))
    found = prepare_state(settings, read=lambda _: ControlRead(Control(generation=2)))
    assert found.control.generation == 7
    (problem,) = found.problems
    assert "generation 2 is below 7" in problem


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
