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
- ``quix``: Quix Streams (the ``bench`` extra): JSON values, a per-key stateful count
  (RocksDB with its changelog topic) and one output record per message: the same shape
  of job as the worker's (decode, keyed state, output), in a Python peer.
"""

import argparse
import contextlib
import json
import os
import sys
import time
import uuid
from typing import Any


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


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("system", choices=["ck", "faust", "quix"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--expect", type=int, required=True)
    parser.add_argument("--state-dir", default="")
    args = parser.parse_args()
    {"ck": run_ck, "faust": run_faust, "quix": run_quix}[args.system](args)


if __name__ == "__main__":
    main()
