"""The topics' specs and how an existing topic differs from its spec (pure): a table of
the differences that break the service and those that are only warnings."""

import pytest

from stream.config import Settings
from stream.ops.topics import DELETE_RETENTION_MS, Found, TopicSpec, differences, specs

SETTINGS = Settings.from_env({"STREAM_PARTITIONS": "12", "STREAM_REPLICATION_FACTOR": "3"})
BY_ROLE = {spec.role: spec for spec in specs(SETTINGS, input_partitions=12)}
COMPACT = {"cleanup.policy": "compact", "delete.retention.ms": str(DELETE_RETENTION_MS)}


def test_one_spec_per_topic_the_service_needs() -> None:
    names = {role: spec.name for role, spec in BY_ROLE.items()}
    assert names == {
        "input": "dsh.session-events",
        "output": "dsh.session-context",
        "dlq": "dsh.session-events.dlq",
        "changelog": "context-stream-sessions-changelog",
        "control": "context-stream-control",
        "leader": "context-stream-__assignor-__leader",
    }
    assert [BY_ROLE[r].partitions for r in ("input", "changelog", "control", "leader")] == [
        12,
        12,
        1,
        1,
    ]
    assert BY_ROLE["output"].config["cleanup.policy"] == "compact"
    assert BY_ROLE["output"].config["delete.retention.ms"] == "604800000"  # 7 days
    assert BY_ROLE["input"].config["retention.ms"] == "604800000"  # the session TTL


def test_the_changelog_follows_an_existing_inputs_count() -> None:
    changelog = next(s for s in specs(SETTINGS, input_partitions=8) if s.role == "changelog")
    assert changelog.partitions == 8


def _found(
    config: dict[str, str] | None = None, partitions: int = 12, replication: int = 3
) -> Found:
    return Found(partitions, replication, config or {})


@pytest.mark.parametrize(
    ("role", "found", "expected"),
    [
        ("output", _found(COMPACT), []),
        ("output", None, [(True, "missing")]),
        ("output", _found({"cleanup.policy": "delete"}), [(True, "must be compact")]),
        (
            "output",
            _found({"cleanup.policy": "compact,delete"}),
            [(False, "expected compact")],  # old sessions' updates go after retention.ms
        ),
        ("changelog", _found(COMPACT, 6), [(True, "must equal the input's 12")]),
        (
            "control",
            _found({"cleanup.policy": "compact"}, 3),
            [(True, "must be 1"), (False, "min.compaction.lag.ms")],
        ),
        ("leader", _found({}, 2), [(True, "must be 1")]),
        ("input", _found({"cleanup.policy": "compact"}), [(True, "must be delete")]),
        (
            "input",
            _found({"cleanup.policy": "delete", "retention.ms": "86400000"}),
            [(False, "retention.ms=86400000 (1 d)")],
        ),
        ("input", _found({"cleanup.policy": "delete", "retention.ms": "-1"}), []),
        (
            "input",
            _found({"cleanup.policy": "delete"}, 24),
            [(False, "STREAM_PARTITIONS says 12")],
        ),
        (
            "output",
            _found({**COMPACT, "delete.retention.ms": "86400000"}),
            [(False, "delete.retention.ms")],
        ),
        (
            "dlq",
            _found({"cleanup.policy": "delete"}, replication=1),
            [(False, "replication factor 1")],
        ),
        (
            "dlq",
            _found({"cleanup.policy": "delete", "min.insync.replicas": "1"}),
            [(False, "min.insync.replicas=1")],
        ),
    ],
)
def test_differences(role: str, found: Found | None, expected: list[tuple[bool, str]]) -> None:
    spec: TopicSpec = BY_ROLE[role]  # type: ignore[index]
    got = differences(spec, found, 12)
    assert len(got) == len(expected), [d.line() for d in got]
    for difference, (breaks, text) in zip(got, expected, strict=True):
        assert difference.breaks == breaks and text in difference.what, difference.line()
        assert difference.line().startswith("BREAKS" if breaks else "warning")


def test_a_topic_whose_settings_the_principal_may_not_read_is_checked_for_its_layout() -> None:
    """The workers' principal has DESCRIBE but not DESCRIBE_CONFIGS (but on the control
    topic): partitions and replication are still checked, the settings are a warning."""
    hidden = Found(6, 3, {}, readable=False)
    got = differences(BY_ROLE["changelog"], hidden, 12)
    assert got[0].breaks and "must equal the input's 12" in got[0].what
    assert not got[-1].breaks and "DESCRIBE_CONFIGS" in got[-1].what
    assert [d.breaks for d in differences(BY_ROLE["output"], Found(12, 3, {}, False), 12)] == [
        False
    ]
