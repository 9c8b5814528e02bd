"""A batch's Redis write alone, as the worker sends it: ``python -m benchmarks.redis_write``.

``RedisSink.write`` of ``--updates`` session updates (payloads of about 600 bytes, each
session written before, so every update passes the guard) against a redis-server this
starts (or ``--url``). Prints, best of ``--repeat``: the write's wall time per update in
the worker and Redis' own CPU per update (``INFO commandstats``), and which RESP parser
redis-py uses (hiredis, when installed, parses replies and packs commands in C).
"""

import argparse
import asyncio
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import redis
from redis.utils import HIREDIS_AVAILABLE

from benchmarks.infra import free_port
from stream.config import Settings
from stream.output.record import SessionUpdate
from stream.publish.redis_sink import RedisSink


def updates(count: int, seq: int) -> list[SessionUpdate]:
    pad = "x" * 480
    return [
        SessionUpdate(
            f"bench-{i}",
            1,
            seq,
            (seq + 1, 0, 0),
            f'{{"sessionId":"bench-{i}","seq":{seq},"pad":"{pad}"}}'.encode(),
        )
        for i in range(count)
    ]


def script_usec(url: str) -> float:
    stats = redis.Redis.from_url(url).info("commandstats")
    names = ("cmdstat_evalsha", "cmdstat_fcall")  # the scripts, now the function library
    return float(sum(v["usec"] for k, v in stats.items() if k.startswith(names)))


async def measure(url: str, count: int, repeat: int) -> tuple[float, float]:
    settings = Settings.from_env({**os.environ, "REDIS_URL": url})
    sink = RedisSink(settings)
    await sink.write(updates(count, 0), now_ms=1)  # every session there: the guard passes
    best_wall = best_cpu = float("inf")
    for seq in range(1, repeat + 1):
        batch = updates(count, seq)
        cpu0 = script_usec(url)
        started = time.perf_counter()
        results = await sink.write(batch, now_ms=seq)
        wall = time.perf_counter() - started
        assert results == [1] * count, "every update must pass the guard"
        best_wall = min(best_wall, wall)
        best_cpu = min(best_cpu, (script_usec(url) - cpu0) / 1e6)
    await sink.client.aclose()
    return best_wall, best_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=600)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--url", help="a Redis to use instead of starting one")
    args = parser.parse_args()
    server = None
    work = Path(tempfile.mkdtemp(prefix="redis-write-"))
    url = args.url
    try:
        if url is None:
            port = free_port()
            server = subprocess.Popen(
                ["redis-server", "--port", str(port), "--save", "", "--dir", str(work)],
                stdout=subprocess.DEVNULL,
            )
            url = f"redis://127.0.0.1:{port}/0"
            for _ in range(100):
                try:
                    redis.Redis.from_url(url).ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.05)
        wall, cpu = asyncio.run(measure(url, args.updates, args.repeat))
        parser_name = "hiredis" if HIREDIS_AVAILABLE else "pure Python"
        print(
            f"redis write: {args.updates:,} updates in {wall * 1e3:.1f} ms,"
            f" {wall / args.updates * 1e6:.1f} us/update in the worker,"
            f" {cpu / args.updates * 1e6:.1f} us/update Redis CPU; parser {parser_name}"
        )
    finally:
        if server is not None:
            server.terminate()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
