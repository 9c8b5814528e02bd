"""What the gateway application holds while it serves, read by its routes and by its
metrics alike: the hub (``HUB``) and the open streams' counts, the stream limits
(``STREAMS``: 429 beyond them). Here, below both ``app`` and ``metrics``, so the metrics
read the application's state without importing the application."""

from aiohttp import web

from stream.gateway.hub import Hub

HUB = web.AppKey("hub", Hub)


class StreamCounts:
    """Open streams per token subject and per client address (429 beyond the limits)."""

    def __init__(self, per_subject: int, per_address: int) -> None:
        self.per_subject = per_subject
        self.per_address = per_address
        self.subjects: dict[str, int] = {}
        self.addresses: dict[str, int] = {}
        self.refused = 0

    def acquire(self, subject: str | None, address: str) -> str | None:
        """Counts a new stream in, or says which limit refuses it."""
        if subject is not None and 0 < self.per_subject <= self.subjects.get(subject, 0):
            self.refused += 1
            return f"at most {self.per_subject} concurrent streams per token subject"
        if 0 < self.per_address <= self.addresses.get(address, 0):
            self.refused += 1
            return f"at most {self.per_address} concurrent streams per client address"
        if subject is not None:
            self.subjects[subject] = self.subjects.get(subject, 0) + 1
        self.addresses[address] = self.addresses.get(address, 0) + 1
        return None

    def release(self, subject: str | None, address: str) -> None:
        for counts, key in ((self.subjects, subject), (self.addresses, address)):
            if key is None or key not in counts:
                continue
            counts[key] -= 1
            if not counts[key]:
                del counts[key]


STREAMS = web.AppKey("streams", StreamCounts)
