"""The two ways input can be wrong, kept apart because they go to different places.

``ContractError``: a readable event breaks the contract (malformed data, a claim over the
wrong range, a gap). It faults the projection that read it; the fault is published as data.

``Unreadable``: the input is not an event at all (not JSON, no usable ``seq``). It cannot be
attributed to a position in a session, so it goes to the dead-letter topic.
"""


class ContractError(ValueError):
    """A readable event violates the contract for the projection reading it."""


class Unreadable(ValueError):
    """Input that cannot be read as an event; dead-lettered with this reason."""
