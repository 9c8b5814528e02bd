"""Every private name of Faust, mode, aiokafka and aiohttp the code relies on, in one list.

The worker drives Faust's consumer in bulk (``stream.app.fetch``, ``stream.app.batching``),
writes its table's RocksDB directly (``stream.app.table``), sends its records in batches
(``stream.app.producer``), backs off failed metadata requests (``stream.app.backoff``),
restores its table in bulk (``stream.app.restore``), leaves its group as a static member
(``stream.app.membership``), fences Faust's topic declarations (``stream.app.declare``)
and reads its consumer's positions for the metrics (``stream.app.monitor``); the gateway
caps its connections around aiohttp's site (``stream.gateway.server``). Each of those
reads, writes or overrides names the libraries do not publish. ``RELIED_ON`` lists them,
each with the classes it is read from (``"module:Class"``) and why, and
``tests/unit/app/test_pins.py`` checks, on every run:

- the list is exactly the private names of the four libraries that code anywhere under
  ``stream/`` uses (the test scans the code's syntax: a new use, or one no longer made,
  fails it until the list says so);
- each name is on each owner listed: an attribute of the class, or one its library
  source defines on its instances (not merely a word found somewhere in the library);
- each module-level name ``PATCHED`` replaces exists (``stream.app.patches`` replaces
  exactly those);
- the installed versions are the ones below, which pyproject.toml pins exactly.

An upgrade of any of the four is a review of this list, never a resolver's choice.
"""

from typing import Final, NamedTuple

FAUST_VERSION: Final = "0.15.3"  # faust-streaming
MODE_VERSION: Final = "0.7.1"  # mode-streaming (Faust's service framework)
AIOKAFKA_VERSION: Final = "0.14.0"
AIOHTTP_VERSION: Final = "3.14.5"


class Borrowed(NamedTuple):
    """A private name of a library: whose it is and what the code does with it."""

    owners: tuple[str, ...]  # the classes it is read from, "package.module:Class"
    why: str  # what is done with it (the modules that do it)


# name -> its owners and what the code does with it
RELIED_ON: Final[dict[str, Borrowed]] = {
    # faust's consumer (its aiokafka driver and consumer thread): the bulk fetch path
    "_drain_messages": Borrowed(
        ("faust.transport.consumer:Consumer",),
        "overridden, the drain loop in bulk (fetch)",
    ),
    "_wait_next_records": Borrowed(
        ("faust.transport.consumer:Consumer",),
        "called, one fetch (fetch)",
    ),
    "_to_message": Borrowed(
        ("faust.transport.drivers.aiokafka:Consumer",),
        "called, a record as Faust's message (fetch)",
    ),
    "_read_offset": Borrowed(
        ("faust.transport.consumer:Consumer",),
        "read and set per partition (fetch, batching)",
    ),
    "_committed_offset": Borrowed(
        ("faust.transport.consumer:Consumer",),
        "read and set per partition (fetch, batching); read for the lag and stall figures "
        "(monitor.positions)",
    ),
    "_buffered_partitions": Borrowed(
        ("faust.transport.consumer:Consumer",),
        "read, partitions with records in hand (fetch)",
    ),
    "_commit_every": Borrowed(
        ("faust.transport.consumer:Consumer",),
        "read, commit after this many acks (fetch)",
    ),
    "_n_acked": Borrowed(
        ("faust.transport.consumer:Consumer",),
        "read and set, acks since the last commit (fetch, batching)",
    ),
    "_add_gap": Borrowed(
        ("faust.transport.consumer:Consumer",),
        "called, a hole in the offsets of a topic outside the bulk path (fetch)",
    ),
    "_acked": Borrowed(
        ("faust.transport.consumer:Consumer",),
        "acked offsets per partition (batching)",
    ),
    "_acked_index": Borrowed(
        ("faust.transport.consumer:Consumer",),
        "the acked offsets as a set (batching)",
    ),
    "_gap": Borrowed(
        ("faust.transport.consumer:Consumer",),
        "gaps per partition, the input's set by _note_gap (batching)",
    ),
    "_new_offset": Borrowed(
        ("faust.transport.consumer:Consumer",),
        "overridden, the offset to commit; Faust's own for topics outside the bulk path (batching)",
    ),
    "_unacked_messages": Borrowed(
        ("faust.transport.consumer:Consumer",),
        "the set wait_empty waits on (batching)",
    ),
    "_waiting_for_ack": Borrowed(
        ("faust.transport.consumer:Consumer",),
        "notified when acks land (batching)",
    ),
    "_seek": Borrowed(
        ("faust.transport.consumer:Consumer",),
        "called, one partition's seek (fetch)",
    ),
    "_new_consumer_thread": Borrowed(
        ("faust.transport.drivers.aiokafka:Consumer",),
        "overridden, the backoff thread (fetch)",
    ),
    "_thread": Borrowed(
        ("faust.transport.drivers.aiokafka:Consumer",),
        "its consumer thread, to seek (fetch)",
    ),
    "_create_consumer": Borrowed(
        ("faust.transport.drivers.aiokafka:AIOKafkaConsumerThread",),
        "overridden, the aiokafka consumer (fetch)",
    ),
    "_consumer": Borrowed(
        ("faust.transport.drivers.aiokafka:AIOKafkaConsumerThread", "faust.app.base:App"),
        "the thread's started aiokafka consumer (fetch); the app's consumer, None until made "
        "(monitor.positions)",
    ),
    "_stopped": Borrowed(
        ("mode.services:Service",),
        "the fetcher's stop event (fetch)",
    ),
    # mode.threads.ServiceThread: the consumer thread started on the worker's loop
    "_thread_started": Borrowed(
        ("mode.threads:ServiceThread",),
        "set, started once (fetch, inline consumer)",
    ),
    "_thread_running": Borrowed(
        ("mode.threads:ServiceThread",),
        "the future _serve notifies (fetch, inline)",
    ),
    "_serve": Borrowed(
        ("mode.threads:ServiceThread",),
        "run as a task of the worker's loop (fetch, inline)",
    ),
    "_gather_remaining_tasks": Borrowed(
        ("mode.threads:ServiceThread",),
        "overridden, the loop is the worker's (fetch, inline)",
    ),
    "_tp_index": Borrowed(
        ("faust.transport.conductor:Conductor",),
        "channels by topic partition (fetch, restore)",
    ),
    # mode.utils.queues.ThrowableQueue and FlowControlEvent: the agent's queue
    "_clear_on_resume": Borrowed(
        ("mode.utils.queues:ThrowableQueue",),
        "turned off for the agent's queue (batching)",
    ),
    "_flow_control": Borrowed(
        ("mode.utils.queues:ThrowableQueue",),
        "its flow control event (batching)",
    ),
    "_queues": Borrowed(
        ("mode.utils.queues:FlowControlEvent",),
        "the queues it clears on resume (batching)",
    ),
    # aiokafka's client and consumer
    "_client": Borrowed(
        ("aiokafka.consumer.consumer:AIOKafkaConsumer",),
        "its client, given backoff (fetch)",
    ),
    "_fetcher": Borrowed(
        ("aiokafka.consumer.consumer:AIOKafkaConsumer",),
        "its fetcher, paced (fetch)",
    ),
    # aiokafka's fetcher and fetch request: each broker's fetch paced (pacing, note 034)
    "_proc_fetch_request": Borrowed(
        ("aiokafka.consumer.fetcher:Fetcher",),
        "wrapped on the instance, a broker's fetch (pacing)",
    ),
    "_max_wait_ms": Borrowed(
        ("aiokafka.protocol.fetch:FetchRequest",),
        "set, how long the fetch waits at the broker (pacing)",
    ),
    "_min_bytes": Borrowed(
        ("aiokafka.protocol.fetch:FetchRequest",),
        "set, the bytes that end its wait (pacing)",
    ),
    "_metadata_update": Borrowed(
        ("aiokafka.client:AIOKafkaClient",),
        "overridden with backoff (backoff)",
    ),
    "_retry_backoff": Borrowed(
        ("aiokafka.client:AIOKafkaClient",),
        "read, the backoff it waits (backoff)",
    ),
    # the producer path: faust's aiokafka Producer and aiokafka's AIOKafkaProducer
    "_producer_type": Borrowed(
        ("faust.transport.drivers.aiokafka:Producer",),
        "overridden, the backoff producer (producer)",
    ),
    "_ensure_producer": Borrowed(
        ("faust.transport.drivers.aiokafka:Producer",),
        "called, the started producer (producer, declare)",
    ),
    "_producer": Borrowed(
        ("faust.transport.drivers.aiokafka:Producer",),
        "its aiokafka producer (producer)",
    ),
    "_message_accumulator": Borrowed(
        ("aiokafka.producer.producer:AIOKafkaProducer",),
        "read, records not yet sent (producer)",
    ),
    "_batches": Borrowed(
        ("aiokafka.producer.message_accumulator:MessageAccumulator",),
        "read, batches not yet sent (producer)",
    ),
    "_partitioner": Borrowed(
        ("aiokafka.producer.producer:AIOKafkaProducer",),
        "called, Java's partitioner (producer)",
    ),
    "_wait_on_metadata": Borrowed(
        ("aiokafka.client:AIOKafkaClient",),
        "called on the producer's client, a topic's partitions (producer)",
    ),
    "_topic_config": Borrowed(
        ("faust.transport.drivers.aiokafka:Transport",),
        "called, the settings Faust's CreateTopics carried, named when the broker refuses it "
        "(declare)",
    ),
    # aiokafka's PartitionRecords: a changelog's part of a fetch handed over unread
    "_records": Borrowed(
        ("aiokafka.consumer.fetcher:PartitionRecords", "aiokafka.consumer.fetcher:Fetcher"),
        "PartitionRecords: read, the part's record batches (restore); Fetcher: read, whether "
        "records wait to be taken (pacing)",
    ),
    "_records_iterator": Borrowed(
        ("aiokafka.consumer.fetcher:PartitionRecords",),
        "replaced for a changelog (restore)",
    ),
    "_check_crcs": Borrowed(
        ("aiokafka.consumer.fetcher:PartitionRecords",),
        "read, check each batch's CRC (restore)",
    ),
    "_isolation_level": Borrowed(
        (
            "aiokafka.consumer.fetcher:PartitionRecords",
            "aiokafka.consumer.consumer:AIOKafkaConsumer",
        ),
        "PartitionRecords: read, read committed or not (restore); AIOKafkaConsumer: set, Faust's "
        "only under exactly-once (fetch)",
    ),
    "_aborted_transactions": Borrowed(
        ("aiokafka.consumer.fetcher:PartitionRecords",),
        "read, the part's aborted transactions (restore)",
    ),
    # static membership: a static member's leave (membership, note 027)
    "_coordinator": Borrowed(
        ("aiokafka.consumer.consumer:AIOKafkaConsumer",),
        "read, its group coordinator (membership)",
    ),
    "_group_instance_id": Borrowed(
        ("aiokafka.consumer.group_coordinator:GroupCoordinator",),
        "read, the static member id (membership)",
    ),
    "_closing": Borrowed(
        ("aiokafka.consumer.group_coordinator:GroupCoordinator",),
        "read, set once close() began (membership)",
    ),
    "_maybe_leave_group": Borrowed(
        ("aiokafka.consumer.group_coordinator:GroupCoordinator",),
        "replaced, a static member's leave (membership)",
    ),
    "_send_req": Borrowed(
        ("aiokafka.consumer.group_coordinator:GroupCoordinator",),
        "called, a request to the coordinator (membership)",
    ),
    # faust's RocksDB store and table
    "_db_for_partition": Borrowed(
        ("faust.stores.rocksdb:Store",),
        "called, one partition's database (table, restore)",
    ),
    "_dbs": Borrowed(
        ("faust.stores.rocksdb:Store",),
        "the open databases (table)",
    ),
    "_visible_items": Borrowed(
        ("faust.stores.rocksdb:Store",),
        "read, a partition's rows (table)",
    ),
    "_new_changelog_topic": Borrowed(
        ("faust.tables.base:Collection",),
        "called, a changelog topic with our settings (table)",
    ),
    # aiohttp: the gateway's listening socket (stream.gateway.server.CappedSite)
    "_server": Borrowed(
        ("aiohttp.web_runner:BaseSite",),
        "set, the listening server its stop() closes and the runner's addresses read; aiohttp has "
        "no public way to wrap a site's protocol (the connection caps)",
    ),
}

# Module-level names replaced at start-up (``stream.app.patches.install``).
PATCHED: Final[dict[str, tuple[str, ...]]] = {
    "aiokafka.consumer.fetcher": ("MemoryRecords", "PartitionRecords"),
    "aiokafka.record._crecords.default_records": (
        "gzip_decode",
        "snappy_decode",
        "lz4_decode",
        "zstd_decode",
    ),
    "aiokafka.record._crecords.legacy_records": ("gzip_decode", "snappy_decode", "lz4_decode"),
    "aiokafka.record.default_records": (
        "gzip_decode",
        "snappy_decode",
        "lz4_decode",
        "zstd_decode",
    ),
    "aiokafka.record.legacy_records": ("gzip_decode", "snappy_decode", "lz4_decode"),
}
