"""The published interface (docs/api/): both documents parse without an error or warning, the
updates the fold makes of the examples fit the update schema, and wrong payloads do not.

The integration test (tests/integration/test_interface.py) validates what a real deployment
publishes; this one is quick and needs only Node."""

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from tests.interface.checker import check

REPO = Path(__file__).resolve().parents[2]
OUTPUT_HEADERS = {"gen": "1", "tally": "15 1 0", "v": "8"}


def folded_examples() -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "stream", "fold", str(REPO / "examples")],
        capture_output=True,
        check=True,
        cwd=REPO,
    )
    return [orjson.loads(line) for line in done.stdout.splitlines()]


def as_update(what: str, update: Any) -> list[dict[str, Any]]:
    """The same update as each channel carries it."""
    session = "s"
    return [
        {
            "what": f"{what} (output)",
            "channel": "output",
            "key": session,
            "headers": OUTPUT_HEADERS,
            "payload": update,
        },
        {"what": f"{what} (redis)", "channel": "sessionChannel", "payload": update},
        {
            "what": f"{what} (sse)",
            "channel": "sessionStream",
            "headers": {"id": "1-15-16-8"},
            "payload": update,
        },
        {"what": f"{what} (http)", "path": "/sessions/{id}/context", "status": 200, "body": update},
    ]


def test_the_documents_parse_and_the_folded_examples_fit() -> None:
    updates = folded_examples()
    assert len(updates) == 4
    observed = [o for i, u in enumerate(updates) for o in as_update(f"example {i}", u)]
    report = check(observed)
    assert report.problems == []
    assert report.failures == []
    assert report.clean, report.stderr
    assert report.matched == {
        "output/update": 4,
        "sessionChannel/update": 4,
        "sessionStream/update": 4,
        "GET /sessions/{id}/context 200 application/json": 4,
    }


GOOD = {
    "sessionId": "s",
    "seq": 3,
    "time": 1700000000000,
    "contextPressure": {"contextWindow": 131072, "pressureTokens": 10, "projectedTokens": 12},
    "contextBreakdown": {"systemTokens": 1, "toolsTokens": 2, "messageTokens": 3},
    "tokenUsage": {
        "uncachedInputTokens": 1,
        "outputTokens": 2,
        "cacheReadTokens": 3,
        "cacheWriteTokens": 4,
    },
}
FAULT = {"seq": 2, "error": "user/message at seq 2: data must be an object"}

WRONG_UPDATES = {
    "no seq": {k: v for k, v in GOOD.items() if k != "seq"},
    "seq as text": GOOD | {"seq": "3"},
    "negative seq": GOOD | {"seq": -1},
    "an unknown field": GOOD | {"percent": 9.2},
    "a fraction of a token": GOOD | {"tokenUsage": GOOD["tokenUsage"] | {"outputTokens": 2.5}},
    "a usage total missing": GOOD | {"tokenUsage": {"outputTokens": 2}},
    "an unknown view field": GOOD | {"contextPressure": {"contextWindow": 1, "percent": 3}},
    "a window of 0": GOOD | {"contextPressure": {"contextWindow": 0}},
    "a fault without error": GOOD | {"faults": {"tokenUsage": {"seq": 2}}},
    "a fault of an unknown projection": GOOD | {"faults": {"contextMeter": FAULT}},
    "empty faults": GOOD | {"faults": {}},
    "rebuilding an unknown projection": GOOD | {"rebuilding": ["contextMeter"]},
    "past 2^53 - 1": GOOD | {"seq": 2**53},
}


def test_a_wrong_update_is_refused_on_every_channel() -> None:
    observed = [o for name, update in WRONG_UPDATES.items() for o in as_update(name, update)]
    report = check(observed)
    assert report.problems == []
    assert report.matched == {}
    assert len(report.failures) == 4 * len(WRONG_UPDATES)
    assert report.returncode == 1


def test_wrong_headers_keys_and_other_messages_are_refused() -> None:
    dead_headers = {
        "reason": "not JSON",
        "source-topic": "t",
        "source-partition": "0",
        "source-offset": "7",
    }
    good = [
        {
            "what": "fault",
            "channel": "output",
            "key": "s",
            "headers": OUTPUT_HEADERS,
            "payload": GOOD | {"faults": {"tokenUsage": FAULT}},
        },
        {"what": "tombstone", "channel": "output", "key": "s", "payload": None},
        {
            "what": "dead letter",
            "channel": "deadLetters",
            "key": "",
            "headers": dead_headers,
            "payload": "{",
        },
        {
            "what": "reset",
            "channel": "input",
            "key": "s",
            "headers": {"stream-reset": "2"},
            "payload": None,
        },
        {
            "what": "expired",
            "channel": "sessionChannel",
            "payload": {"sessionId": "s", "expired": True},
        },
    ]
    wrong = [
        {"what": "no headers", "channel": "output", "key": "s", "payload": GOOD},
        {
            "what": "a tally of two",
            "channel": "output",
            "key": "s",
            "headers": OUTPUT_HEADERS | {"tally": "1 2"},
            "payload": GOOD,
        },
        {
            "what": "generation 0",
            "channel": "output",
            "key": "s",
            "headers": OUTPUT_HEADERS | {"gen": "0"},
            "payload": GOOD,
        },
        {
            "what": "no key",
            "channel": "output",
            "key": "",
            "headers": OUTPUT_HEADERS,
            "payload": GOOD,
        },
        {
            "what": "dead letter without reason",
            "channel": "deadLetters",
            "key": "",
            "headers": {k: v for k, v in dead_headers.items() if k != "reason"},
            "payload": "{",
        },
        {
            "what": "dead letter, unknown header",
            "channel": "deadLetters",
            "key": "",
            "headers": dead_headers | {"x": "1"},
            "payload": "{",
        },
        {
            "what": "reset generation 0",
            "channel": "input",
            "key": "s",
            "headers": {"stream-reset": "0"},
            "payload": None,
        },
        {
            "what": "an event without seq",
            "channel": "input",
            "key": "s",
            "payload": {"type": "turn/start", "time": 1, "data": {}},
        },
        {"what": "an empty segment", "channel": "input", "key": "s", "payload": []},
        {
            "what": "expired false",
            "channel": "sessionChannel",
            "payload": {"sessionId": "s", "expired": False},
        },
        {
            "what": "sse id of a seq",
            "channel": "sessionStream",
            "headers": {"id": "15"},
            "payload": GOOD,
        },
        {
            "what": "hash without update",
            "schema": "RedisSessionHash",
            "value": {"gen": "1", "seq": "1", "n": "1", "v": "8"},
        },
        {
            "what": "listing row without seq",
            "path": "/sessions",
            "status": 200,
            "body": {"sessions": [{"sessionId": "s"}], "scanned": 1},
        },
        {
            "what": "health as text",
            "path": "/healthz",
            "status": 200,
            "body": {"redis": "yes", "subscribed": True, "clients": 0, "dropped": 0, "refused": 0},
        },
        {"what": "an undocumented status", "path": "/healthz", "status": 500, "body": {}},
        {
            "what": "HTML where JSON is documented",
            "path": "/sessions/{id}/context",
            "status": 200,
            "contentType": "text/html; charset=utf-8",
        },
    ]
    report = check(good + wrong)
    assert report.problems == []
    assert sum(report.matched.values()) == len(good), report.failures
    assert sorted(f["what"] for f in report.failures) == sorted(o["what"] for o in wrong)
