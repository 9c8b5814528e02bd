"""How long Redis takes to come back: re-seeding N sessions through the guarded script.

Builds N realistic session rows (a short folded session each, varied ids), starts a
private redis-server, and times the two repair paths against it:

- the worker's automatic re-seed (``Publisher.reseed`` over table rows: decode, build the
  update, write in pipelined chunks), into an empty Redis, then again into a full one
  (every write a no-op: what a re-seed on partition assignment costs);
- the Redis half of ``stream republish`` (updates already read from the output topic).

    .venv/bin/python -m benchmarks.reseed --sessions 100000
"""

import argparse
import asyncio
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from stream.config import Settings
from stream.contract.events import read_event
from stream.ops.republish import write_all
from stream.output.record import SessionUpdate
from stream.publish.publisher import Publisher
from stream.publish.redis_sink import RedisSink
from stream.session import codec
from stream.session.processor import SessionRecord, process, update

REPO = Path(__file__).resolve().parents[1]


def _row(index: int) -> bytes:
    record = SessionRecord.new()
    events: list[dict[str, Any]] = [
        {"type": "request/context", "seq": 0, "time": 1, "data": {"contextWindow": 131072}},
        {
            "type": "system/message",
            "seq": 1,
            "time": 1,
            "surfaceOp": "append",
            "data": {
                "message": {"role": "system", "content": [{"type": "text", "text": "Be terse."}]}
            },
        },
        {
            "type": "user/message",
            "seq": 2,
            "time": 1,
            "surfaceOp": "append",
            "data": {"role": "user", "content": [{"type": "text", "text": f"task {index}"}]},
        },
    ]
    for event in events:
        record.tally.count(process(record, read_event(event)))
    return codec.encode(record)


class _NoKafka:
    """Re-seeding never touches Kafka; the publisher only needs the type."""

    def write_row(self, *_: Any) -> Any:
        raise AssertionError

    send_update = send_dead_letter = store_row = send_row = write_row

    async def left(self) -> None:
        raise AssertionError


async def _reseed(settings: Settings, rows: list[tuple[bytes, bytes]]) -> float:
    publisher: Publisher = Publisher(settings, _NoKafka(), RedisSink(settings))
    started = time.perf_counter()
    sent = await publisher.reseed(rows, 0)
    await publisher.flush(60)
    elapsed = time.perf_counter() - started
    await publisher.sink.close()
    assert sent == len(rows)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    args = parser.parse_args()
    template = _row(0)
    rows = [(f"session-{i:07d}".encode(), template) for i in range(args.sessions)]
    with tempfile.TemporaryDirectory() as workdir:
        script = REPO / "deploy" / "redis.sh"
        url = subprocess.run(
            ["bash", str(script), "start", "--port", "26399", "--dir", workdir],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        try:
            settings = Settings(redis_url=url, redis_key_prefix="bench:")
            empty = asyncio.run(_reseed(settings, rows))
            full = asyncio.run(_reseed(settings, rows))
            body = orjson.dumps(update("x", codec.decode(template)))
            updates = [SessionUpdate(key.decode(), 1, 2, (3, 0, 0), body) for key, _ in rows]
            republish_settings = Settings(redis_url=url, redis_key_prefix="copy:")
            started = time.perf_counter()
            asyncio.run(write_all(republish_settings, updates))
            republish = time.perf_counter() - started
        finally:
            subprocess.run(["bash", str(script), "stop", "--dir", workdir], check=False)
    n = args.sessions
    print(f"sessions                              {n:>10,}")
    for label, seconds in (
        ("worker re-seed into an empty Redis", empty),
        ("worker re-seed into a current Redis", full),
        ("republish, Redis half", republish),
    ):
        print(f"{label:<38}{seconds:>9.2f} s  ({n / seconds:>9,.0f} sessions/s)")


if __name__ == "__main__":
    main()
