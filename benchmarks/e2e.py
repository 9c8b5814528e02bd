"""End-to-end throughput: produce a corpus into Kafka and time until the worker has
accounted for every event (folded, duplicate, faulted or dead-lettered) in Redis.

    python -m benchmarks.e2e [--sessions N] [--turns T] [--segment S] [--partitions P]

Starts its own Kafka and Redis (deploy/*.sh, free ports, temp dirs) unless
KAFKA_BOOTSTRAP_SERVERS and REDIS_URL are set. Prints figures; asserts nothing about speed.
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.corpus import write_corpus
from benchmarks.infra import REPO, Infra, Scenario, WorkerProcess, infrastructure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--segment", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=6)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="e2e-"))
    with infrastructure(work) as infra:
        _run(args, work, infra)


def _run(args: argparse.Namespace, work: Path, infra: Infra) -> None:
    scenario = Scenario(infra, work, partitions=args.partitions)
    paths = write_corpus(work / "corpus", args.sessions, args.turns, seed=7)
    size = sum(p.stat().st_size for p in paths)
    worker = WorkerProcess(scenario, "e2e")
    try:
        worker.start(timeout=120)
        t0 = time.monotonic()
        produced = subprocess.run(
            [sys.executable, "-m", "stream", "produce", "--segment", str(args.segment)]
            + [str(p) for p in paths],
            env=scenario.env(),
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
        t_produced = time.monotonic() - t0
        total = int(produced.stderr.split("produced ", 1)[1].split(" ", 1)[0])
        scenario.wait_accounted(total, timeout=600)
        elapsed = time.monotonic() - t0
        counts = scenario.infra.redis().hgetall(f"{scenario.prefix}stats")
        print(
            f"corpus: {len(paths)} sessions, {total:,} events, {size / 1e6:.1f} MB "
            f"(packed logs), segment {args.segment}, {args.partitions} partitions, 1 worker"
        )
        print(
            f"produce finished after {t_produced:.2f} s; all events accounted after "
            f"{elapsed:.2f} s -> {total / elapsed:,.0f} events/s end to end"
        )
        print(f"counts: { {_text(k): int(v) for k, v in counts.items()} }")
    finally:
        worker.stop()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


if __name__ == "__main__":
    main()
