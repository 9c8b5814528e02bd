"""The batch fold alone, as the worker calls it: ``python -m benchmarks.batch``.

Single-event messages of 600 sessions (one user message in five, the rest streamed deltas)
in batches of 40, rows kept between batches as the table keeps them; prints the best of
five runs in messages per second. No broker: the figure is the pure core's share of the
worker's single-event drain (docs/performance.md).
"""

import argparse
import time

import orjson

from stream.session.batch import Message, fold_batch
from stream.testing import events as build


def messages(count: int, sessions: int) -> list[Message]:
    seqs = [0] * sessions
    out = []
    for offset in range(count):
        s = offset % sessions
        seq = seqs[s]
        seqs[s] += 1
        if seq % 5 == 0:
            event = build.user_message(seq, build.texts("hello world " * 3), time=seq)
        else:
            event = build.assistant_chunk(seq, build.text_delta("abc"), time=seq)
        out.append(Message(f"sess-{s}".encode(), orjson.dumps(event), "t", 0, offset))
    return out


def run(batch: list[Message], size: int) -> float:
    rows: dict[bytes, bytes] = {}
    started = time.perf_counter()
    for start in range(0, len(batch), size):
        result = fold_batch(batch[start : start + size], lambda key, _: rows.get(key))
        for change in result.sessions:
            rows[change.key] = change.row
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=30_000)
    parser.add_argument("--sessions", type=int, default=600)
    parser.add_argument("--batch", type=int, default=40)
    args = parser.parse_args()
    batch = messages(args.messages, args.sessions)
    best = min(run(batch, args.batch) for _ in range(5))
    print(f"batch fold: {len(batch) / best:,.0f} messages/s (batches of {args.batch})")


if __name__ == "__main__":
    main()
