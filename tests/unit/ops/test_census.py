"""The census of a partition's rows stays exact while batches change rows during its walk."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from stream.ops.census import Census, Figures
from stream.session.batch import PARTITION_KEY, Message, fold_batch
from stream.session.partition import PartitionRow
from tests.generators.extreme import extreme_messages
from tests.unit.session.test_batch_hostile import messages_of


def figures_of(rows: dict[bytes, bytes]) -> Figures:
    census = Census()
    census.assign([0])
    for key in sorted(rows):
        census.visit(0, key, rows[key])
    census.walked(0)
    return census.counted[0]


@settings(max_examples=150, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(2, 40), st.integers(1, 6))
def test_the_census_equals_a_fresh_count_however_batches_and_the_walk_interleave(
    rng: random.Random, count: int, step: int
) -> None:
    raws = extreme_messages(rng, count, prefix="c")
    messages = messages_of(raws, 1)
    rows: dict[bytes, bytes] = {}

    def fold(chunk: list) -> None:
        result = fold_batch(chunk, lambda key, _: rows.get(key))
        for change in result.sessions:
            rows[change.key] = change.row
            census.observe(0, change.key, change.before, change.after)
        for part in result.partitions:
            rows[PARTITION_KEY] = part.row
            census.observe_partition(0, PartitionRow.decode(part.row))

    census = Census()
    half = len(messages) // 2
    fold(messages[:half])  # before the partition was assigned here
    census.assign([0])
    walk = iter(sorted(rows.items()))
    rest = messages[half:]
    while True:  # walk a few rows, fold a batch, walk on: as the worker's loop does
        chunk = [next(walk, None) for _ in range(step)]
        for item in chunk:
            if item is not None:
                census.visit(0, *item)
        if rest:
            fold(rest[:step])
            rest = rest[step:]
        if all(item is None for item in chunk) and not rest:
            break
    census.walked(0)
    assert census.counted[0] == figures_of(rows)
    fold(messages[:3])  # after the walk: batches alone
    assert census.counted[0] == figures_of(rows)


def test_an_unassigned_partition_is_dropped_and_a_new_one_walked() -> None:
    census = Census()
    assert census.assign([1, 2]) == [1, 2]
    census.walked(1)
    assert census.assign([1, 3]) == [3]
    assert set(census.counted) == {1} and set(census.walking) == {3}


def test_a_new_session_is_counted_once_when_the_census_moves_as_its_row_goes_in() -> None:
    """The worker moves the census in the same turn of the loop as it writes a batch's
    rows (``Metrics.observe_rows`` before ``Publisher.deliver``): a walk whose snapshot is
    taken after the write skips the session and leaves it to the batch. Moved after the
    write, the walk would count the new row and the batch add it again."""
    first = fold_batch(
        [Message(b"old", b'{"type":"turn/start","seq":0}', "e", 0, 0)], lambda key, _: None
    )
    rows = {c.key: c.row for c in first.sessions}
    new = fold_batch(
        [Message(b"new", b'{"type":"turn/start","seq":0}', "e", 0, 1)],
        lambda key, _: rows.get(key),
    )

    def walk_after(observe_first: bool) -> Figures:
        census = Census()
        census.assign([0])
        stored = dict(rows)
        if observe_first:
            for change in new.sessions:
                census.observe(0, change.key, change.before, change.after)
        stored.update({c.key: c.row for c in new.sessions})
        for key in sorted(stored):  # the walk's snapshot: the new row is in it
            census.visit(0, key, stored[key])
        if not observe_first:
            for change in new.sessions:
                census.observe(0, change.key, change.before, change.after)
        census.walked(0)
        assert figures_of(stored).sessions == 2
        return census.counted[0]

    assert walk_after(observe_first=True).sessions == 2
    assert walk_after(observe_first=False).sessions == 3  # the race this order closes
