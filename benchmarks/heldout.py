"""The live bench's held-out traffic (``benchmarks.run --only live --traffic heldout``):
logs of the mixed modern shape (``benchmarks.corpus``' ``small-mixed/modern``, its
texts in mixed scripts, a header line and a system message), sized as the issue's
held-out harness had them: a mean event of ~270 bytes, a p99 of ~1.6 kB, about half of
the events chunks. The bench plays them as unseen sessions, fresh ids at every step.

    python -m benchmarks.heldout [--logs N] [--events E]   # the traffic's figures
"""

import argparse
import dataclasses
import random
import statistics
from pathlib import Path
from typing import Any

from benchmarks.corpus import _Source, shaped_session, shapes
from stream.contract.jsontext import dumps
from stream.ops.produce import segments

# small-mixed/modern with a shorter system prompt (repeated in every request header: the
# p99 event), prompts and tool results: measured 275 bytes a mean event, 1,620 bytes p99,
# 49 % chunks over 20 logs.
SHAPE = dataclasses.replace(
    next(s for s in shapes() if s.name == "small-mixed/modern"),
    system_words=80,
    prompt_words=(40, 70),
    result_words=(25, 45),
)


def heldout_logs(work: Path, logs: int, events: int, seed: int = 11) -> list[list[Any]]:
    """``logs`` logs of ``SHAPE`` as raw events in log order, each at least ``events``
    long (turns are added until the shortest is)."""
    turns = max(2, events // 30)  # ~40 events a turn: start a little over
    while True:
        rng = random.Random(f"heldout/{seed}/{turns}")
        source = _Source(rng, SHAPE.text)
        shape = dataclasses.replace(SHAPE, turns=(turns, turns))
        out = work / f"heldout-{seed}-{turns}"
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        for i in range(logs):
            path = out / f"heldout-{i:04d}.jsonl"
            if not path.exists():
                path.write_bytes(shaped_session(rng, source, f"heldout-{i:04d}", shape, 1e15))
            paths.append(str(path))
        found: dict[str, list[Any]] = {}
        for session_id, chunk in segments(paths, 1 << 30):
            found.setdefault(session_id, []).extend(chunk)
        shortest = min(len(v) for v in found.values())
        if shortest >= events:
            return list(found.values())
        turns = int(turns * events / max(shortest, 1) * 1.1) + 1


def figures(logs: list[list[Any]]) -> dict[str, float]:
    """Mean and p99 event bytes (as produced, one per message) and the share of chunks."""
    sizes = sorted(len(dumps(e)) for events in logs for e in events)
    chunks = sum(e.get("type") == "assistant/chunk" for events in logs for e in events)
    return {
        "events": len(sizes),
        "mean_bytes": statistics.mean(sizes),
        "p99_bytes": sizes[int(len(sizes) * 0.99)],
        "chunk_share": chunks / len(sizes),
    }


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--logs", type=int, default=40)
    parser.add_argument("--events", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        found = figures(heldout_logs(Path(work), args.logs, args.events))
    print(
        f"{found['events']:,} events: mean {found['mean_bytes']:.0f} bytes, p99"
        f" {found['p99_bytes']:,} bytes, {found['chunk_share']:.0%} chunks"
    )


if __name__ == "__main__":
    main()
