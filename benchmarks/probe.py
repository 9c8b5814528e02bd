"""``stream worker`` with a count of the Kafka requests it sends, for ``benchmarks.run``.

    BENCH_PROBE_FILE=counts.json python -m benchmarks.probe [worker options]

Counts every request the worker's Kafka clients (aiokafka: the consumer thread's and the
producer's connections) put on the wire, by API (``Produce``, ``Fetch``,
``OffsetCommit``, ...), and rewrites the JSON file twice a second. Benchmark-only: the
service itself is run unchanged.
"""

import collections
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from aiokafka.conn import AIOKafkaConnection  # type: ignore[import-untyped]

COUNTS: collections.Counter[str] = collections.Counter()
_send = AIOKafkaConnection.send


def _counted_send(self: Any, request: Any, expect_response: bool = True) -> Any:
    COUNTS[type(request).__name__.split("_v")[0].removesuffix("Request")] += 1
    return _send(self, request, expect_response)


def _dump(path: Path) -> None:
    while True:
        time.sleep(0.5)
        scratch = path.with_suffix(".tmp")
        scratch.write_text(json.dumps(dict(COUNTS)))
        scratch.replace(path)


def main() -> int:
    AIOKafkaConnection.send = _counted_send
    target = os.environ.get("BENCH_PROBE_FILE")
    if target:
        threading.Thread(target=_dump, args=(Path(target),), daemon=True).start()
    from stream.cli import main as stream_main

    return stream_main(["worker", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
