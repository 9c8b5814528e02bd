"""Every Redis key and channel name (``stream.output.layout``), one prefix for all."""

import pytest

from stream.output.layout import RedisLayout


def test_the_default_prefix() -> None:
    layout = RedisLayout()
    assert layout.prefix == "ctx:"
    assert layout.session_key("s1") == "ctx:session:s1"


def test_every_name_carries_the_prefix() -> None:
    layout = RedisLayout("t:")
    names = {
        "session": layout.session_key("s"),
        "pattern": layout.session_pattern,
        "recent": layout.recent_key,
        "stats": layout.stats_key,
        "tallies": layout.tallies_key,
        "dead": layout.dead_key,
        "marker": layout.marker_key,
    }
    assert names == {
        "session": "t:session:s",
        "pattern": "t:session:*",
        "recent": "t:recent",
        "stats": "t:stats",
        "tallies": "t:tallies",
        "dead": "t:dead",
        "marker": "t:marker",
    }
    assert len(set(names.values())) == len(names)


@pytest.mark.parametrize("session_id", ["s1", "", "a:b:c", "session:x", "😀/\u2028", "*"])
def test_session_id_of_inverts_session_key(session_id: str) -> None:
    layout = RedisLayout("t:")
    assert layout.session_id_of(layout.session_key(session_id)) == session_id


@pytest.mark.parametrize(
    "name", ["t:stats", "t:recent", "u:session:s", "session:s", "t:sessions:s"]
)
def test_other_names_belong_to_no_session(name: str) -> None:
    assert RedisLayout("t:").session_id_of(name) is None


def test_an_empty_prefix_is_allowed() -> None:
    layout = RedisLayout("")
    assert layout.session_key("s") == "session:s"
    assert layout.session_id_of("session:s") == "s"


def test_layouts_with_different_prefixes_share_nothing() -> None:
    a, b = RedisLayout("a:"), RedisLayout("b:")
    assert a.session_key("s") != b.session_key("s")
    assert b.session_id_of(a.session_key("s")) is None
    assert RedisLayout("a:") == a and hash(RedisLayout("a:")) == hash(a)


# --- cluster mode (REDIS_CLUSTER, note 014) ---------------------------------------------------
def _slot_tag(name: str) -> str:
    """The hash tag Redis Cluster slots a name by (the first ``{...}``, non-empty)."""
    start = name.find("{")
    end = name.find("}", start + 1)
    assert start >= 0 and end > start + 1, name
    return name[start + 1 : end]


def test_the_standalone_layout_is_unchanged_by_the_cluster_field() -> None:
    assert RedisLayout("t:") == RedisLayout("t:", cluster=False)
    layout = RedisLayout("t:")
    assert layout.session_keys("s") == ("t:session:s", "t:tallies", "t:stats", "t:recent")
    assert layout.stats_keys == ("t:stats",) and layout.recent_keys == ("t:recent",)
    assert layout.marker_keys == ("t:marker",) and layout.partition_stats_key == "t:stats"


@pytest.mark.parametrize("session_id", ["s1", "", "a:b", "{x}", "}{", "😀", "session:{03}:x"])
def test_a_session_and_its_shard_totals_share_one_hash_tag(session_id: str) -> None:
    layout = RedisLayout("t:", cluster=True)
    keys = layout.session_keys(session_id)
    shard = layout.shard_of(session_id)
    assert {_slot_tag(k) for k in (*keys, layout.feed_of(session_id))} == {f"{shard:02d}"}
    assert keys[0] == f"t:session:{{{shard:02d}}}:{session_id}"
    assert layout.session_id_of(keys[0]) == session_id


def test_cluster_names() -> None:
    layout = RedisLayout("t:", cluster=True)
    assert layout.shard_of("s1") == 0  # CRC-32: the same in every process and release
    assert layout.session_key("s1") == "t:session:{00}:s1"
    assert layout.feed_channel(10) == "t:session:{10}"
    assert layout.feed_of("s1") == "t:session:{00}"
    assert layout.session_id_of("t:session:{00}") is None  # a feed, not a session
    assert layout.session_id_of("t:session:{11}:s1") is None  # not s1's shard
    assert len(layout.stats_keys) == 17 and layout.stats_keys[-1] == "t:stats:{p}"
    assert layout.recent_keys[0] == "t:recent:{00}" and len(layout.recent_keys) == 16
    assert layout.dead_key == "t:dead:{p}" and layout.retired_key == "t:retired:{p}"
    assert layout.marker_keys[-1] == "t:marker:{p}" and len(layout.marker_keys) == 17
    for name in ("recent_key", "stats_key", "tallies_key", "marker_key", "session_pattern"):
        with pytest.raises(ValueError, match="cluster"):
            getattr(layout, name)


def test_shards_are_used_about_evenly() -> None:
    layout = RedisLayout("t:", cluster=True)
    counts = [0] * 16
    for i in range(16_000):
        counts[layout.shard_of(f"session-{i}")] += 1
    assert min(counts) > 800 and max(counts) < 1200


def test_totals_sum_the_shards_and_recent_merges_them() -> None:
    from stream.output.layout import newest, sum_stats

    assert sum_stats([{b"folded": b"2"}, {"folded": "3", "expired": "1"}, {}]) == {
        "folded": 5,
        "expired": 1,
    }
    pages = [[(b"a", 9.0), (b"b", 5.0)], [(b"c", 7.0), (b"d", 1.0)], []]
    assert newest(pages, 3) == [(b"a", 9.0), (b"c", 7.0), (b"b", 5.0)]
    assert newest(pages, 0) == []
