"""``stream compare``: what Redis holds, checked against the offline fold of the same logs.

The demo's closing verdict, and an operator's check after a backfill: every session of
the logs is folded offline (as ``stream fold``) and its last update compared with the one
Redis serves; the events folded are compared with Redis' totals, whose surplus (events of
session lives that ended: a reset, or an expiry followed by a new life) is named as such.
The comparison is a pure function (``verdict``); ``run`` only reads the logs and Redis.
"""

import argparse
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from stream.cli.reach import (
    LIMITS_ENV,
    READER,
    REDIS_ENV,
    connect_redis,
    environment,
    redis_refused,
)
from stream.config import Settings
from stream.logs.reader import read_logs
from stream.output.layout import read_stats
from stream.output.redis import UPDATE_FIELD
from stream.session.offline import fold_lines
from stream.session.processor import SessionRecord, Tally, update

# What both sides carry and a reader sees: the position and the figures.
COMPARED = ("sessionId", "seq", "contextPressure", "contextBreakdown", "tokenUsage", "faults")


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "compare",
        help="check that Redis serves what the offline fold of these logs gives",
        description="Fold the logs offline (as `stream fold`) and compare each session's last"
        " update with the one Redis holds, and the events folded with Redis' totals. Prints"
        " one verdict line; exit 0 when every session agrees, 1 when one does not (or Redis"
        " cannot be reached), naming the first that differ.",
        epilog=environment(REDIS_ENV, LIMITS_ENV, f"it runs as {READER}"),
    )
    parser.add_argument("paths", nargs="+", metavar="PATH")
    parser.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="compare again every half second until they agree or this long has passed"
        " (a worker still folding the last events)",
    )
    parser.set_defaults(run=run)


@dataclass(frozen=True)
class Verdict:
    sessions: int
    agreeing: int
    folded: int  # events the offline fold folded
    redis_folded: int  # Redis' total
    differing: list[str] = field(default_factory=list)  # "id: why", the first few

    @property
    def agrees(self) -> bool:
        return self.sessions > 0 and self.agreeing == self.sessions

    def lines(self) -> list[str]:
        if not self.agrees:
            head = (
                f"Redis disagrees with the offline fold: {self.agreeing:,}/{self.sessions:,}"
                f" sessions agree, {self.folded:,} events folded offline"
            )
            return [head, *(f"  {item}" for item in self.differing)]
        line = (
            f"Redis agrees with the offline fold: {self.agreeing:,}/{self.sessions:,} sessions,"
            f" {self.folded:,} events folded"
        )
        extra = self.redis_folded - self.folded
        if extra > 0:
            line += (
                f"; Redis' total of {self.redis_folded:,} folded also counts {extra:,} events"
                " outside these sessions' current lives: earlier lives of sessions reset or"
                " expired (they stay in every total), or other sessions under this prefix"
            )
        elif extra < 0:
            line += f"; Redis' total reads only {self.redis_folded:,} folded"
        return [line]


def _shown(value: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value[key] for key in COMPARED if key in value}


def verdict(
    offline: Mapping[str, Mapping[str, Any]],
    served: Mapping[str, Mapping[str, Any] | None],
    folded: int,
    redis_folded: int,
    shown: int = 5,
) -> Verdict:
    """Compare each session's offline update with Redis' (``None``: Redis has none)."""
    agreeing = 0
    differing: list[str] = []
    for session_id, ours in offline.items():
        theirs = served.get(session_id)
        if theirs is None:
            why = "not in Redis"
        elif _shown(theirs) == _shown(ours):
            agreeing += 1
            continue
        else:
            keys = [k for k in COMPARED if ours.get(k) != theirs.get(k)]
            why = f"differs in {', '.join(keys)} (Redis seq {theirs.get('seq')}," + (
                f" offline seq {ours.get('seq')})"
            )
        if len(differing) < shown:
            differing.append(f"{session_id}: {why}")
    return Verdict(len(offline), agreeing, folded, redis_folded, differing)


def fold_offline(paths: list[str], settings: Settings) -> tuple[dict[str, Any], int]:
    """Each session's last update and the events folded, as ``stream fold`` gives them."""
    folds = settings.limits.folds
    records: dict[str, SessionRecord] = {}
    for log in read_logs(paths):
        record = records.get(log.session_id)
        if record is None:
            record = records[log.session_id] = SessionRecord.new(folds)
        for _ in fold_lines(record, log.lines(), False):
            pass  # unreadable lines: `stream fold` reports them
    total = Tally()
    for record in records.values():
        total.add(record.tally)
    updates = {sid: update(sid, record) for sid, record in records.items() if record.seen >= 0}
    return updates, total.folded


def read_served(client: Any, settings: Settings, ids: Sequence[str]) -> dict[str, Any]:
    layout = settings.redis_layout
    pipe = client.pipeline(transaction=False)
    for session_id in ids:
        pipe.hget(layout.session_key(session_id), UPDATE_FIELD)
    served: dict[str, Any] = {}
    for session_id, payload in zip(ids, pipe.execute(), strict=True):
        try:
            served[session_id] = None if payload is None else orjson.loads(payload)
        except orjson.JSONDecodeError:
            served[session_id] = None
    return served


def run(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    offline, folded = fold_offline(args.paths, settings)
    client = connect_redis("compare", settings)
    if client is None:
        return 1
    import redis

    deadline = time.monotonic() + max(0.0, args.wait)
    while True:
        try:
            served = read_served(client, settings, list(offline))
            totals = read_stats(client, settings.redis_layout)
        except redis.RedisError as error:  # a permission the user lacks: one line, no trace
            redis_refused("compare", settings, error, READER)
            return 1
        result = verdict(offline, served, folded, totals["folded"])
        if result.agrees or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    for line in result.lines():
        print(line)
    return 0 if result.agrees else 1
