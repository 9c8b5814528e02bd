"""What the Redis queue keeps for a session whose life ended while Redis was away: the
drop of the old life is never lost to a newer entry, and a re-seed never brings it back."""

from stream.output.record import SessionUpdate
from stream.publish.queue import merge


def update(seq: int, n: int, replaces: tuple[int, int, int, int] | None = None) -> SessionUpdate:
    return SessionUpdate("s", 1, seq, (n, 0, 0), b"{}", 0, replaces)


def drop(seq: int, n: int) -> SessionUpdate:
    return SessionUpdate("s", 1, seq, (n, 0, 0), b"", 0, (1, seq, n, 0), gone=True)


def test_a_new_life_after_a_sweep_keeps_the_drop_it_needs_first() -> None:
    merged = merge(drop(40, 41), update(0, 1), live=True)
    assert merged is not None and merged.seq == 0 and merged.replaces == (1, 40, 41, 0)
    assert not merged.gone
    later = merge(merged, update(3, 4), live=True)
    assert later is not None and later.seq == 3 and later.replaces == (1, 40, 41, 0)


def test_a_drop_replaces_the_old_lifes_queued_update() -> None:
    merged = merge(update(39, 40), drop(40, 41), live=True)
    assert merged is not None and merged.gone and merged.replaces == (1, 40, 41, 0)


def test_a_reseed_never_brings_a_dropped_life_back_nor_replaces_a_newer_entry() -> None:
    assert merge(drop(40, 41), update(40, 41), live=False) is None
    assert merge(update(5, 6, replaces=(1, 40, 41, 0)), update(30, 31), live=False) is None
    assert merge(update(5, 6), update(3, 4), live=False) is None
    reseeded = merge(update(3, 4), update(5, 6), live=False)
    assert reseeded is not None and reseeded.seq == 5


def test_an_older_live_update_without_a_drop_is_not_taken() -> None:
    assert merge(update(5, 6), update(3, 4), live=True) is None
