"""The expiry path alone: ``python -m benchmarks.expiry``.

Three figures of the pure core, no broker: the batch fold with a TTL (the stream time
kept per message) against without, the cost of one sweep step of 256 sessions, and the
deadline index's cost per session filed and taken. Best of five runs each.
"""

import argparse
import time
from collections.abc import Callable

import orjson

from benchmarks.batch import simple as messages
from stream.session.batch import Limits, Message, fold_batch
from stream.session.expiry import Deadlines, sweep
from stream.session.partition import PARTITION_KEY, PartitionRow
from stream.testing import events as build

DAY = 86_400_000


def best(run: Callable[[], float]) -> float:
    return min(run() for _ in range(5))


def fold_rate(ttl: int, count: int) -> float:
    batch = messages(count, 600)

    def run() -> float:
        rows: dict[bytes, bytes] = {}
        started = time.perf_counter()
        for start in range(0, len(batch), 40):
            chunk = batch[start : start + 40]
            result = fold_batch(chunk, lambda key, _: rows.get(key), Limits(session_ttl=ttl))
            for change in result.sessions:
                rows[change.key] = change.row
        return time.perf_counter() - started

    return len(batch) / best(run)


def sweep_step(sessions: int, step: int) -> float:
    """Seconds per step of ``step`` due sessions among ``sessions`` rows."""
    rows: dict[bytes, bytes] = {}
    t0 = 1_700_000_000_000
    for n in range(sessions):
        event = build.user_message(0, build.texts("hello world " * 3), time=t0 + n)
        msg = Message(f"s{n}".encode(), orjson.dumps(event), "t", 0, n)
        result = fold_batch([msg], lambda key, _: rows.get(key), Limits(session_ttl=DAY))
        for change in result.sessions:
            rows[change.key] = change.row
        for part in result.partitions:
            rows[PARTITION_KEY] = part.row
    clock = PartitionRow.decode(rows[PARTITION_KEY])
    clock.now = t0 + 10 * DAY
    rows[PARTITION_KEY] = clock.encode()
    keys = [f"s{n}".encode() for n in range(sessions)]

    def run() -> float:
        started = time.perf_counter()
        for start in range(0, len(keys), step):
            sweep(0, keys[start : start + step], lambda key, _: rows.get(key), DAY)
        return time.perf_counter() - started

    return best(run) / (len(keys) / step)


def index_cost(sessions: int) -> tuple[float, float]:
    def run_set() -> float:
        index = Deadlines()
        started = time.perf_counter()
        for n in range(sessions):
            index.set(0, b"s%d" % n, n)
        return time.perf_counter() - started

    index = Deadlines()
    for n in range(sessions):
        index.set(0, b"s%d" % n, n)
    started = time.perf_counter()
    while index.due(0, sessions + 1, 256):
        pass
    take = time.perf_counter() - started
    return best(run_set) / sessions, take / sessions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=30_000)
    parser.add_argument("--sessions", type=int, default=20_000)
    args = parser.parse_args()
    rates: dict[int, list[float]] = {0: [], 7 * DAY: []}
    for _ in range(3):  # interleaved: a busy machine slows both alike
        for ttl, found in rates.items():
            found.append(fold_rate(ttl, args.messages))
    without, with_ttl = max(rates[0]), max(rates[7 * DAY])
    print(f"batch fold without a TTL: {without:,.0f} messages/s")
    print(f"batch fold with a TTL:    {with_ttl:,.0f} messages/s ({with_ttl / without:.2f}x)")
    step = sweep_step(args.sessions, 256)
    print(f"sweep step of 256 due sessions: {step * 1e3:.1f} ms (pure core, no delivery)")
    filed, taken = index_cost(args.sessions * 10)
    print(f"deadline index: {filed * 1e6:.2f} us per session filed, {taken * 1e6:.2f} us taken")


if __name__ == "__main__":
    main()
