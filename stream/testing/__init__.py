"""Support for the tests and benchmarks, not part of the service or the contract.

``stream.testing.events`` is the event factory: the raw dsh events and log rows the unit
and property tests, the oracle's session generator and the benchmark corpus are built from.
Nothing under ``stream/`` outside this package imports it. Like the fold core it is pure
(no I/O, no clock, no service framework: tests/unit/test_purity.py checks), but it is not
compiled with it (``stream.native.CORE``).
"""
