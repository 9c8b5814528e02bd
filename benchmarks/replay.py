"""Replay throughput: fold a corpus once, stop the worker, ``stream replay`` the whole
backlog, restart the worker and time it back to zero lag, with ``stream lag --watch``'s
progress lines; then check Redis against the offline fold.

    python -m benchmarks.replay [--sessions N] [--turns T] [--segment S] [--rebuild]

Without ``--rebuild`` the replay re-reads records the table already holds (all of them
are recognised as applied); with it the table state is discarded and everything is
folded afresh. Starts its own Kafka and Redis (deploy/*.sh, free ports, temp dirs) unless
KAFKA_BOOTSTRAP_SERVERS and REDIS_URL are set. Prints figures; asserts only correctness.
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from benchmarks.corpus import write_corpus
from benchmarks.infra import REPO, Infra, Scenario, WorkerProcess, infrastructure
from stream.config import Settings
from stream.ops.lag import read_lag

STREAM = (sys.executable, "-m", "stream")


def _stream(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "stream", *args], env=env, cwd=REPO, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"stream {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout + done.stderr


def _wait_caught_up(settings: Settings, worker: WorkerProcess, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while read_lag(settings).lag:
        if not worker.alive():
            raise SystemExit(f"the worker died:\n{worker.tail()}")
        if time.monotonic() > deadline:
            raise SystemExit("the worker did not catch up")
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--segment", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--interval", type=float, default=2.0, help="progress line every")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="replay-"))
    with infrastructure(work) as infra:
        _run(args, work, infra)


def _run(args: argparse.Namespace, work: Path, infra: Infra) -> None:
    scenario = Scenario(infra, work, partitions=args.partitions)
    env = scenario.env()
    settings = Settings.from_env(env)
    worker = WorkerProcess(scenario, "replay")
    try:
        paths = write_corpus(work / "corpus", args.sessions, args.turns, seed=7)
        worker.start(timeout=120)
        produced = _stream(env, "produce", "--segment", str(args.segment), *map(str, paths))
        print(produced.strip().splitlines()[-1])
        began = time.monotonic()
        _wait_caught_up(settings, worker)
        print(f"first fold: caught up {time.monotonic() - began:.1f} s after produce returned")
        worker.stop()

        mode = ["--to-earliest", "--wait", "30"] + (["--rebuild"] if args.rebuild else [])
        print(f"\n$ stream replay {' '.join(mode)} --dry-run")
        print(_stream(env, "replay", *mode, "--dry-run").rstrip())
        print(f"\n$ stream replay {' '.join(mode)} --yes")
        print(_stream(env, "replay", *mode, "--yes").rstrip())
        backlog = read_lag(settings).lag

        began = time.monotonic()
        worker.start(timeout=120)
        ready = time.monotonic() - began
        print(f"\nworker ready after {ready:.1f} s; $ stream lag --watch --until-caught-up")
        watch = subprocess.Popen(
            [*STREAM, "lag", "--watch", "--until-caught-up", "--interval", str(args.interval)],
            env=env,
            cwd=REPO,
            text=True,
            stdout=subprocess.PIPE,
        )
        assert watch.stdout is not None
        for line in watch.stdout:  # the progress lines, as they come
            print(line, end="", flush=True)
            if not worker.alive():
                watch.kill()
                raise SystemExit(f"the worker died:\n{worker.tail()}")
        watch.wait()
        elapsed = time.monotonic() - began

        fold = subprocess.run(
            [sys.executable, "-m", "stream", "fold", *map(str, paths)],
            cwd=REPO,
            capture_output=True,
            check=True,
        )
        expected = {line["sessionId"]: line for line in map(orjson.loads, fold.stdout.splitlines())}
        client = infra.redis()
        same = sum(
            1
            for sid, line in expected.items()
            if (raw := client.hget(f"{scenario.prefix}session:{sid}", "update")) is not None
            and orjson.loads(raw) == line
        )
        print(
            f"\nreplay{' --rebuild' if args.rebuild else ''}: {backlog:,} records"
            f" (segment {args.segment}, {args.partitions} partitions, 1 worker) back to lag 0"
            f" in {elapsed:.1f} s from worker start -> {backlog / elapsed:,.0f} records/s"
            f" ({backlog / max(elapsed - ready, 1e-9):,.0f} records/s after ready)"
        )
        print(f"Redis equals the offline fold for {same} of {len(expected)} sessions")
        if same != len(expected):
            raise SystemExit(1)
    finally:
        worker.stop()


if __name__ == "__main__":
    main()
