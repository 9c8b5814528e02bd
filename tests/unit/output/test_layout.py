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
