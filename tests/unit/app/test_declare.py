"""The fence over Faust's topic declarations (``stream.app.declare``): a topic the broker
lists is never created, and a creation refused for want of an ACL is one line naming the
topic, what an admin must create and the ACLs that would do."""

import pytest

from stream.app import declare
from stream.app.declare import Declaration, plan, refusal
from stream.app.fetch import BulkTransport

LEADER = Declaration("app-__assignor-__leader", 1, 3, {})
CHANGELOG = Declaration("app-sessions-changelog", 12, 3, {"cleanup.policy": "compact"})


@pytest.mark.parametrize(
    ("topic", "visible", "decided"),
    [
        # pre-created by an admin, DESCRIBE granted: nothing is sent
        ("app-__assignor-__leader", {"app-__assignor-__leader", "app.events"}, "exists"),
        # missing, or present but not visible without DESCRIBE: Faust's CreateTopics
        ("app-sessions-changelog", {"app-__assignor-__leader"}, "create"),
        ("app-sessions-changelog", set(), "create"),
        # a name is not a prefix match
        ("app-sessions-changelog", {"app-sessions-changelog-old"}, "create"),
    ],
)
def test_a_topic_the_broker_lists_is_never_created(
    topic: str, visible: set[str], decided: str
) -> None:
    assert plan(topic, visible) == decided


@pytest.mark.parametrize(
    ("code", "name"),
    [(29, "TOPIC_AUTHORIZATION_FAILED"), (31, "CLUSTER_AUTHORIZATION_FAILED")],
)
def test_an_acl_refusal_is_one_line_naming_the_topic_and_the_acls(code: int, name: str) -> None:
    line = refusal(CHANGELOG, code)
    assert line is not None
    assert "\n" not in line
    assert line.startswith("topic app-sessions-changelog is missing")
    assert f"({name})" in line
    # what an admin creates, with Faust's settings, and the ACLs either way
    assert "12 partitions, replication 3, cleanup.policy=compact" in line
    assert "grant DESCRIBE on it, or grant CREATE on it" in line
    assert 'docs/deploy.md, "Kafka ACLs"' in line


def test_one_partition_is_said_in_the_singular() -> None:
    line = refusal(LEADER, 29)
    assert line is not None and "(1 partition, replication 3)" in line


@pytest.mark.parametrize(
    "code",
    [
        None,  # not a broker error code at all
        36,  # TOPIC_ALREADY_EXISTS: Faust takes it as done before it gets here
        38,  # INVALID_REPLICATION_FACTOR: Faust's own error names the topic and reason
        44,  # POLICY_VIOLATION
    ],
)
def test_other_failures_stay_faust_s_own_error(code: int | None) -> None:
    assert refusal(CHANGELOG, code) is None


def test_the_worker_s_producer_is_fenced() -> None:
    """The transport the worker installs builds a producer whose declarations are fenced."""
    assert issubclass(BulkTransport.Producer, declare.FencedProducer)
