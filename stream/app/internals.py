"""Every private name of Faust, mode and aiokafka the worker relies on, in one list.

The worker drives Faust's consumer in bulk (``stream.app.fetch``, ``stream.app.batching``),
writes its table's RocksDB directly (``stream.app.table``), sends its records in batches
(``stream.app.producer``), backs off failed metadata requests (``stream.app.backoff``),
inflates compressed input within bounds (``stream.app.inflate``) and fences Faust's topic
declarations (``stream.app.declare``). Each of those reads,
writes or overrides names the libraries do not publish. ``RELIED_ON`` lists them, and
``tests/unit/app/test_pins.py`` checks, on every run:

- the list is exactly the private names ``stream/app/`` uses that the installed libraries
  define (the test scans the code: a new use, or one no longer made, fails it until the
  list says so);
- each module-level name ``PATCHED`` replaces exists;
- the installed versions are the ones below, which pyproject.toml pins exactly.

An upgrade of any of the three is a review of this list, never a resolver's choice.
"""

from typing import Final

FAUST_VERSION: Final = "0.15.3"  # faust-streaming
MODE_VERSION: Final = "0.7.1"  # mode-streaming (Faust's service framework)
AIOKAFKA_VERSION: Final = "0.14.0"

# name -> whose it is and what the worker does with it
RELIED_ON: Final[dict[str, str]] = {
    # faust.transport.consumer.Consumer (and its aiokafka driver): the bulk fetch path
    "_drain_messages": "faust Consumer: overridden, the drain loop in bulk (fetch)",
    "_wait_next_records": "faust Consumer: called, one fetch (fetch)",
    "_to_message": "faust aiokafka Consumer: called, a record as Faust's message (fetch)",
    "_read_offset": "faust Consumer: read and set per partition (fetch, batching)",
    "_committed_offset": "faust Consumer: read and set per partition (fetch, batching)",
    "_buffered_partitions": "faust Consumer: read, partitions with records in hand (fetch)",
    "_commit_every": "faust Consumer: read, commit after this many acks (fetch)",
    "_n_acked": "faust Consumer: read and set, acks since the last commit (fetch, batching)",
    "_add_gap": "faust Consumer: called, a hole in the offsets of a topic outside the bulk"
    " path (fetch)",
    "_acked": "faust Consumer: acked offsets per partition (batching)",
    "_acked_index": "faust Consumer: the acked offsets as a set (batching)",
    "_gap": "faust Consumer: gaps per partition, the input's set by _note_gap (batching)",
    "_new_offset": "faust Consumer: overridden, the offset to commit; Faust's own for topics"
    " outside the bulk path (batching)",
    "_unacked_messages": "faust Consumer: the set wait_empty waits on (batching)",
    "_waiting_for_ack": "faust Consumer: notified when acks land (batching)",
    "_new_consumer_thread": "faust aiokafka Consumer: overridden, the backoff thread (fetch)",
    "_thread": "faust aiokafka Consumer: its consumer thread, to seek (fetch)",
    "_seek": "faust aiokafka ConsumerThread: called, one partition's seek (fetch)",
    "_create_consumer": "faust ConsumerThread: overridden, the aiokafka consumer (fetch)",
    "_stopped": "mode Service: the fetcher's stop event (fetch)",
    # mode.threads.ServiceThread: the consumer thread started on the worker's loop
    "_thread_started": "mode ServiceThread: set, started once (fetch, inline consumer)",
    "_thread_running": "mode ServiceThread: the future _serve notifies (fetch, inline)",
    "_serve": "mode ServiceThread: run as a task of the worker's loop (fetch, inline)",
    "_gather_remaining_tasks": "mode ServiceThread: overridden, the loop is the worker's"
    " (fetch, inline)",
    "_tp_index": "faust Conductor: channels by topic partition (fetch, restore)",
    # mode.utils.queues.ThrowableQueue and FlowControlEvent: the agent's queue
    "_clear_on_resume": "mode ThrowableQueue: turned off for the agent's queue (batching)",
    "_flow_control": "mode ThrowableQueue: its flow control event (batching)",
    "_queues": "mode FlowControlEvent: the queues it clears on resume (batching)",
    # aiokafka's client and consumer
    "_client": "aiokafka AIOKafkaConsumer: its client, given backoff (fetch)",
    "_fetch_max_wait_ms": "aiokafka AIOKafkaConsumer: set, Faust fixes 1.5 s (fetch)",
    "_metadata_update": "aiokafka AIOKafkaClient: overridden with backoff (backoff)",
    "_retry_backoff": "aiokafka AIOKafkaClient: read, the backoff it waits (backoff)",
    # the producer path: faust's aiokafka Producer and aiokafka's AIOKafkaProducer
    "_producer_type": "faust aiokafka Producer: overridden, the backoff producer (producer)",
    "_ensure_producer": "faust aiokafka Producer: called, the started producer (producer)",
    "_producer": "faust aiokafka Producer: its aiokafka producer (producer)",
    "_message_accumulator": "aiokafka AIOKafkaProducer: read, records not yet sent (producer)",
    "_batches": "aiokafka MessageAccumulator: read, batches not yet sent (producer)",
    "_partitioner": "aiokafka AIOKafkaProducer: called, Java's partitioner (producer)",
    "_wait_on_metadata": "aiokafka AIOKafkaProducer: called, a topic's partitions (producer)",
    "_topic_config": "faust aiokafka Transport: called, the settings Faust's CreateTopics"
    " carried, named when the broker refuses it (declare)",
    # aiokafka's PartitionRecords: a changelog's part of a fetch handed over unread
    "_records": "aiokafka PartitionRecords: read, the part's record batches (restore)",
    "_records_iterator": "aiokafka PartitionRecords: replaced for a changelog (restore)",
    "_check_crcs": "aiokafka PartitionRecords: read, check each batch's CRC (restore)",
    "_isolation_level": "aiokafka PartitionRecords: read, read committed or not (restore);"
    " AIOKafkaConsumer: set, Faust's only under exactly-once (fetch)",
    "_aborted_transactions": "aiokafka PartitionRecords: read, the part's aborted"
    " transactions (restore)",
    # static membership: a static member's leave (membership, note 027)
    "_consumer": "faust aiokafka ConsumerThread: read, its started aiokafka consumer (fetch)",
    "_coordinator": "aiokafka AIOKafkaConsumer: read, its group coordinator (membership)",
    "_group_instance_id": "aiokafka GroupCoordinator: read, the static member id (membership)",
    "_closing": "aiokafka GroupCoordinator: read, set once close() began (membership)",
    "_maybe_leave_group": "aiokafka GroupCoordinator: replaced, a static member's leave"
    " (membership)",
    "_send_req": "aiokafka GroupCoordinator: called, a request to the coordinator (membership)",
    # faust's RocksDB store and table
    "_db_for_partition": "faust rocksdb Store: called, one partition's database (table, restore)",
    "_dbs": "faust rocksdb Store: the open databases (table)",
    "_visible_items": "faust rocksdb Store: read, a partition's rows (table)",
    "_new_changelog_topic": "faust Collection: called, a changelog topic with our settings (table)",
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
