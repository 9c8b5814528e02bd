"""Backlog-drain peers for ``benchmarks.run``: the same records read by other consumers.

Each one is a separate process that reads a topic from the beginning until it has seen
``--expect`` messages, then prints one JSON line ``{"messages", "events", "first",
"last"}`` (wall-clock seconds of its first and last record: group joins and start-up are
not timed, for any system).

    python -m benchmarks.peers ck|faust|quix --bootstrap B --topic T --expect N [--out O]

- ``ck``: raw confluent-kafka, ``consume()`` in batches, nothing decoded: the ceiling.
- ``faust``: stock faust-streaming, one agent, ``take_events(2000, 0.05)``, counting
  events (the stock per-message path with no work: our worker's path before the bulk
  consumer, without the fold).
- ``quix``: Quix Streams: JSON values, a per-key stateful count (RocksDB with its
  changelog topic) and one output record per message: the same shape of job as the
  worker's (decode, keyed state, output), in a Python peer.

The live bench's Quix Streams peer (``benchmarks.sweep``) is here too, a process that
runs until SIGTERM:

    python -m benchmarks.peers live-quix --bootstrap B --topic T --redis URL --prefix P

Quix Streams runs from a venv of its own, ``build/peers-venv`` (``make bench`` makes it,
``PEERS_INSTALL`` below): it caps confluent-kafka below the version the project's lock
holds, so it cannot share the project's venv. ``peers_python`` finds it; this module
imports nothing outside the standard library at its top, so it runs in either venv.
"""

import argparse
import contextlib
import functools
import json
import os
import re
import sys
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PEERS_VENV = REPO / "build" / "peers-venv"
QUIX_VERSION = "3.28.1"  # the Makefile's QUIX_VERSION: what `make bench` installs
PEERS_INSTALL = "make build/peers-venv/.installed (or make bench)"


@functools.cache
def peers_python() -> str | None:
    """The interpreter of the peers' venv (``BENCH_PEERS_PYTHON`` overrides), or None when
    it is missing or cannot import Quix Streams (the bench then runs without Quix)."""
    import subprocess

    python = os.environ.get("BENCH_PEERS_PYTHON") or str(PEERS_VENV / "bin" / "python")
    if not os.access(python, os.X_OK):
        return None
    done = subprocess.run(
        [python, "-c", "import quixstreams, redis"], capture_output=True, timeout=120
    )
    return python if done.returncode == 0 else None


def _report(messages: int, events: int, first: float, last: float, before: int = 0) -> None:
    """``before``: events already counted at ``first`` (a first batch), not timed."""
    line = {"messages": messages, "events": events, "first": first, "last": last, "before": before}
    print(json.dumps(line))
    sys.stdout.flush()


def _events_in(value: bytes) -> int:
    return value.count(b'"seq"') if value[:1] == b"[" else 1


def run_ck(args: argparse.Namespace) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": f"peer-ck-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
        }
    )
    consumer.subscribe([args.topic])
    seen = events = before = 0
    first = last = 0.0
    try:
        while seen < args.expect:
            batch = consumer.consume(1_000, 0.1)
            if not batch:
                continue
            for message in batch:
                if message.error() is None:
                    seen += 1
                    events += _events_in(message.value() or b"")
            last = time.time()
            if not first:
                first, before = last, events
    finally:
        consumer.close()
    _report(seen, events, first, last, before)


def run_faust(args: argparse.Namespace) -> None:
    import faust

    app = faust.App(
        f"peer-faust-{uuid.uuid4().hex[:8]}",
        broker=f"kafka://{args.bootstrap}",
        store="memory://",
        datadir=args.state_dir or f"/tmp/peer-faust-{uuid.uuid4().hex[:8]}",
        web_enabled=False,
        consumer_auto_offset_reset="earliest",
        processing_guarantee="at_least_once",
        stream_wait_empty=True,
    )
    topic = app.topic(
        args.topic, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
    )
    state = {"seen": 0, "events": 0, "first": 0.0, "last": 0.0, "before": 0}

    @app.agent(topic, concurrency=1)
    async def count(stream: Any) -> None:
        async for values in stream.take_events(2000, within=0.05):
            state["seen"] += len(values)
            state["events"] += sum(_events_in(e.message.value) for e in values)
            state["last"] = time.time()
            if not state["first"]:
                state["first"], state["before"] = state["last"], state["events"]
            if state["seen"] >= args.expect:
                s = {k: int(v) for k, v in state.items() if k in ("seen", "events", "before")}
                _report(s["seen"], s["events"], state["first"], state["last"], s["before"])
                os._exit(0)  # measured: no need for a graceful stop

    worker = faust.Worker(app, loglevel="WARNING", quiet=True, redirect_stdouts=False)
    with contextlib.suppress(SystemExit):
        worker.execute_from_commandline()


def run_quix(args: argparse.Namespace) -> None:
    import logging

    from quixstreams import Application

    app = Application(
        broker_address=args.bootstrap,
        consumer_group=f"peer-quix-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        state_dir=args.state_dir or f"/tmp/peer-quix-{uuid.uuid4().hex[:8]}",
        loglevel=logging.WARNING,
    )
    source = app.topic(args.topic, value_deserializer="json")
    output = app.topic(f"{args.topic}.quix-out", value_serializer="json")
    state_seen = {"seen": 0, "events": 0, "first": 0.0, "last": 0.0, "before": 0}

    def fold(value: Any, state: Any) -> dict[str, Any]:
        n = len(value) if type(value) is list else 1
        total = state.get("events", 0) + n
        state.set("events", total)
        state_seen["seen"] += 1
        state_seen["events"] += n
        state_seen["last"] = time.time()
        if not state_seen["first"]:
            state_seen["first"], state_seen["before"] = state_seen["last"], n
        return {"events": total}

    sdf = app.dataframe(source)
    sdf = sdf.apply(fold, stateful=True)
    sdf.to_topic(output)
    app.run(count=args.expect, collect=False)
    _report(
        int(state_seen["seen"]),
        int(state_seen["events"]),
        state_seen["first"],
        state_seen["last"],
        int(state_seen["before"]),
    )


def live_quix(args: argparse.Namespace) -> None:
    """What a user would write instead of the worker: a Quix Streams app that keeps a
    count per session in its state store (RocksDB, with its changelog topic) and writes
    each event's update to Redis as it goes, ``SET {prefix}quix:{key}`` and ``PUBLISH
    {prefix}session:{key}`` in one round trip, the relay's way, so the live bench's
    subscriber stamps it the same. The update carries the event's ``seq``. Reads its
    topic from the beginning: the bench waits for its warm-up (or probe) events before
    timing anything, so the group join is never in a step."""
    import logging
    import signal

    import orjson
    import redis
    from quixstreams import Application

    client = redis.Redis.from_url(args.redis)
    client.ping()
    app = Application(
        broker_address=args.bootstrap,
        # Its changelog topics are named after the group: Kafka's topic characters only.
        consumer_group=re.sub(r"[^A-Za-z0-9._-]", "-", f"{args.prefix}quix"),
        auto_offset_reset="earliest",
        state_dir=args.state_dir or f"/tmp/peer-quix-{uuid.uuid4().hex[:8]}",
        loglevel=logging.WARNING,
    )
    source = app.topic(args.topic, key_deserializer="bytes", value_deserializer="json")
    latest, channel = f"{args.prefix}quix:".encode(), f"{args.prefix}session:".encode()

    def write(value: Any, key: Any, _timestamp: int, _headers: Any, state: Any) -> None:
        count = state.get("events", 0) + 1
        state.set("events", count)
        seq = value.get("seq") if type(value) is dict else None
        update = orjson.dumps({"sessionId": key.decode(), "seq": seq, "events": count})
        pipe = client.pipeline(transaction=False)
        pipe.set(latest + key, update)
        pipe.publish(channel + key, update)
        pipe.execute()

    app.dataframe(source).update(write, stateful=True, metadata=True)
    # Quix stops on SIGTERM itself; stdout tells the bench the app is about to join.
    signal.signal(signal.SIGTERM, lambda *_: app.stop())
    print("ready", flush=True)
    app.run()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("system", choices=["ck", "faust", "quix", "live-quix"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--expect", type=int, default=0)
    parser.add_argument("--state-dir", default="")
    parser.add_argument("--redis", default="")
    parser.add_argument("--prefix", default="")
    args = parser.parse_args()
    runners = {"ck": run_ck, "faust": run_faust, "quix": run_quix, "live-quix": live_quix}
    runners[args.system](args)


if __name__ == "__main__":
    main()
