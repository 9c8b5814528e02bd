"""The fetch's pace applied to aiokafka: each broker's next fetch waits there as long, and
for as many bytes, as ``stream.app.drain.Pace`` says after its last one.

aiokafka builds every fetch from the consumer's fixed ``fetch_max_wait_ms`` and
``fetch_min_bytes``; the fetcher's request to each broker is wrapped here, and its wait
and least bytes set per broker just before it is sent. The private names are listed in
``stream.app.internals``.
"""

from collections.abc import Callable, Collection
from typing import Any

from stream.app.drain import Pace, Wait


def install(
    fetcher: Any,
    pace: Pace,
    topics: Collection[str],
    sent: Callable[[bool], None] | None = None,
) -> None:
    """Pace ``fetcher``'s requests (aiokafka's ``Fetcher`` of a started consumer: its
    routine looks the request method up on each fetch, so every later one is paced), and
    tell ``sent`` of each fetch whether it rests.

    Pending records are those of ``topics`` (the input) fetched and not yet taken: a
    recovered changelog's last fetch stays in the fetcher untaken for good."""
    request_fetch = fetcher._proc_fetch_request
    nodes: dict[Any, Wait] = {}  # broker -> its next fetch's wait

    async def paced(assignment: Any, node_id: Any, request: Any) -> bool:
        wait = nodes.get(node_id) or pace.first()
        request._max_wait_ms, request._min_bytes = wait.ms, wait.min_bytes
        if sent is not None:
            sent(wait.resting)
        fetched: bool = await request_fetch(assignment, node_id, request)
        pending = any(tp.topic in topics for tp in fetcher._records)
        nodes[node_id] = pace.next(fetched, pending)
        return fetched

    fetcher._proc_fetch_request = paced
