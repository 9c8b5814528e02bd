"""``stream compare``'s verdict: a pure function of the two sides."""

from typing import Any

from stream.cli.compare import verdict


def _update(session_id: str, seq: int, used: int) -> dict[str, Any]:
    return {
        "sessionId": session_id,
        "seq": seq,
        "time": 1_700_000_000_000,
        "contextPressure": {"contextWindow": 1000, "projectedTokens": used},
        "contextBreakdown": {"systemTokens": 1, "toolsTokens": 2, "messageTokens": 3},
        "tokenUsage": {"uncachedInputTokens": 4},
    }


def test_agreement_names_the_sessions_and_events() -> None:
    offline = {"a": _update("a", 5, 10), "b": _update("b", 7, 20)}
    result = verdict(offline, dict(offline), folded=7898, redis_folded=7898)
    assert result.agrees
    assert result.lines() == [
        "Redis agrees with the offline fold: 2/2 sessions, 7,898 events folded"
    ]


def test_a_larger_redis_total_is_explained_not_hidden() -> None:
    offline = {"a": _update("a", 5, 10)}
    result = verdict(offline, dict(offline), folded=7898, redis_folded=10213)
    (line,) = result.lines()
    assert line.startswith("Redis agrees with the offline fold: 1/1 sessions, 7,898 events folded;")
    assert "10,213 folded also counts 2,315 events" in line
    assert "reset or expired" in line


def test_a_missing_or_different_session_is_a_disagreement() -> None:
    offline = {"a": _update("a", 5, 10), "b": _update("b", 7, 20), "c": _update("c", 1, 1)}
    served: dict[str, Any] = {"a": _update("a", 5, 10), "b": _update("b", 6, 19), "c": None}
    result = verdict(offline, served, folded=13, redis_folded=11)
    assert not result.agrees
    head, *why = result.lines()
    assert head.startswith("Redis disagrees with the offline fold: 1/3 sessions agree")
    assert why == [
        "  b: differs in seq, contextPressure (Redis seq 6, offline seq 7)",
        "  c: not in Redis",
    ]


def test_nothing_to_compare_is_no_agreement() -> None:
    assert not verdict({}, {}, folded=0, redis_folded=0).agrees


def test_an_event_time_alone_is_not_a_difference() -> None:
    ours = _update("a", 5, 10)
    theirs = ours | {"time": 1}
    assert verdict({"a": ours}, {"a": theirs}, folded=5, redis_folded=5).agrees
