"""The batch fold alone, as the worker calls it: ``python -m benchmarks.batch``.

Single-event messages of 600 sessions, rows kept between batches as the table keeps them;
prints the best of five runs in messages per second and milliseconds per batch. No
broker: the figure is the pure core's share of the worker's per-batch time
(docs/performance.md, note 016).

- ``--shape simple`` (the default): one user message in five, the rest streamed deltas, in
  batches of 40 (the single-event drain's share).
- ``--shape live``: the live benchmark's generated logs, round-robin over the sessions as
  ``make bench``'s live section produces them, in batches of ``--batch`` (3,400: a batch at
  a third of the worker's drain rate on the 2-vCPU machine), each batch touching nearly
  every session. ``--keep 0`` decodes every stored row; the default hands back the
  records the last batch wrote (``KeptRecords``), as the worker does.
"""

import argparse
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import orjson

from stream.app.table import KeptRecords
from stream.session.batch import Message, fold_batch
from stream.testing import events as build


def simple(count: int, sessions: int) -> list[Message]:
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


def live(count: int, sessions: int) -> list[Message]:
    from benchmarks.infra import corpus_sessions  # the live section's corpus

    with TemporaryDirectory() as work:
        corpus = corpus_sessions(Path(work), min(sessions, 40), 60)
    bases = [[orjson.dumps(e) for e in events] for events in corpus.values()]
    logs = [bases[i % len(bases)] for i in range(sessions)]
    cursor = [0] * sessions
    out: list[Message] = []
    s = 0
    while len(out) < count and any(c < len(log) for c, log in zip(cursor, logs, strict=True)):
        c = cursor[s]
        if c < len(logs[s]):
            out.append(Message(f"live-{s}".encode(), logs[s][c], "t", 0, len(out)))
            cursor[s] = c + 1
        s = (s + 1) % sessions
    return out


def run(batch: list[Message], size: int, keep: int) -> float:
    rows: dict[bytes, bytes] = {}
    kept = KeptRecords(keep)
    recall = kept.recall if keep else None
    started = time.perf_counter()
    for start in range(0, len(batch), size):
        result = fold_batch(
            batch[start : start + size], lambda key, _: rows.get(key), recall=recall
        )
        for change in result.sessions:
            rows[change.key] = change.row
        kept.remember(result.sessions)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=("simple", "live"), default="simple")
    parser.add_argument("--messages", type=int, help="default: 30,000 simple, 120,000 live")
    parser.add_argument("--sessions", type=int, default=600)
    parser.add_argument("--batch", type=int, help="default: 40 simple, 3,400 live")
    parser.add_argument("--keep", type=int, default=20_000, help="records kept (0: decode)")
    args = parser.parse_args()
    if args.shape == "live":
        size = args.batch or 3_400
        batch = live(args.messages or 120_000, args.sessions)
    else:
        size = args.batch or 40
        batch = simple(args.messages or 30_000, args.sessions)
    best = min(run(batch, size, args.keep) for _ in range(5))
    batches = -(-len(batch) // size)
    print(
        f"batch fold ({args.shape}, keep {args.keep:,}): {len(batch) / best:,.0f} messages/s,"
        f" {best / batches * 1e3:.1f} ms per batch of {size:,}"
    )


if __name__ == "__main__":
    main()
