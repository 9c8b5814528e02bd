"""End-to-end throughput: produce a corpus into Kafka and time until the worker has
accounted for every event (folded, duplicate, faulted or dead-lettered) in Redis.

    python -m benchmarks.e2e [--sessions N] [--turns T] [--segment S] [--partitions P]

Starts its own Kafka and Redis (deploy/*.sh, free ports, temp dirs) unless
KAFKA_BOOTSTRAP_SERVERS and REDIS_URL are set. Prints figures; asserts nothing about speed.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis

from benchmarks.corpus import write_corpus
from benchmarks.infra import infrastructure

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--segment", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=6)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="e2e-"))
    with infrastructure(work) as infra:
        _run(args, work, infra.bootstrap, infra.redis_url)


def _run(args: argparse.Namespace, work: Path, bootstrap: str, redis_url: str) -> None:
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    env = dict(
        os.environ,
        KAFKA_BOOTSTRAP_SERVERS=bootstrap,
        REDIS_URL=redis_url,
        STREAM_APP_ID=name,
        STREAM_INPUT_TOPIC=f"{name}.events",
        STREAM_OUTPUT_TOPIC=f"{name}.context",
        REDIS_KEY_PREFIX=f"{name}:",
        STREAM_PARTITIONS=str(args.partitions),
        STREAM_WEB_ENABLED="0",
        STREAM_STATE_DIR=str(work / "state"),
    )
    paths = write_corpus(work / "corpus", args.sessions, args.turns, seed=7)
    size = sum(p.stat().st_size for p in paths)
    worker = subprocess.Popen(
        [sys.executable, "-m", "stream", "worker"],
        env=env,
        cwd=REPO,
        stdout=(work / "worker.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while "Worker]: Ready" not in (work / "worker.log").read_text(errors="replace"):
            if worker.poll() is not None or time.monotonic() > deadline:
                raise SystemExit((work / "worker.log").read_text()[-3000:])
            time.sleep(0.2)
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        t0 = time.monotonic()
        produced = subprocess.run(
            [
                sys.executable,
                "-m",
                "stream",
                "produce",
                "--segment",
                str(args.segment),
                *map(str, paths),
            ],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
        t_produced = time.monotonic() - t0
        total = int(produced.stderr.split("produced ", 1)[1].split(" ", 1)[0])
        while True:
            counts = {k: int(v) for k, v in client.hgetall(f"{name}:stats").items()}
            if sum(counts.values()) >= total:
                break
            time.sleep(0.05)
        elapsed = time.monotonic() - t0
        print(
            f"corpus: {len(paths)} sessions, {total:,} events, {size / 1e6:.1f} MB "
            f"(packed logs), segment {args.segment}, {args.partitions} partitions, 1 worker"
        )
        print(
            f"produce finished after {t_produced:.2f} s; all events accounted after "
            f"{elapsed:.2f} s -> {total / elapsed:,.0f} events/s end to end"
        )
        print(f"counts: {counts}")
    finally:
        worker.terminate()
        worker.wait(60)


if __name__ == "__main__":
    main()
