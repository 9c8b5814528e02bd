"""context-stream: fold dsh session events into per-session context projections.

The pure core (``contract``, ``pricing``, ``projections``, ``session``) knows nothing
about Kafka, Faust, RocksDB or Redis; the service edges call it.
"""

__version__ = "0.1.0"

from stream import native

native.activate()  # the mypyc-compiled core when it matches the sources (stream/native.py)
