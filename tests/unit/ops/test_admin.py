"""partition_count waits out the moment a new topic is known to the controller only."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from stream.ops.admin import partition_count


class Metadata:
    """Answers list_topics with the given topic metadata, one per call, the last repeated."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls = 0

    def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return SimpleNamespace(topics={} if answer is None else {topic: answer})


UNKNOWN = SimpleNamespace(error="UNKNOWN_TOPIC_OR_PART", partitions={})
KNOWN = SimpleNamespace(error=None, partitions={0: None, 1: None, 2: None})


def test_the_count_is_read_once_the_broker_knows_the_topic() -> None:
    client = Metadata(None, UNKNOWN, UNKNOWN, KNOWN)
    assert partition_count(client, "t", timeout=5) == 3  # type: ignore[arg-type]
    assert client.calls == 4


def test_a_topic_that_never_appears_is_an_error_not_zero_partitions() -> None:
    client = Metadata(UNKNOWN)
    with pytest.raises(RuntimeError, match=r"topic t has no partitions.*UNKNOWN_TOPIC_OR_PART"):
        partition_count(client, "t", timeout=0.3)  # type: ignore[arg-type]
