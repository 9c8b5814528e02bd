"""Service configuration, read once from the environment (documented in the README).

One frozen value: the Faust app, the confluent-kafka tools and the Redis sink all read
their settings from here, so a variable means the same thing everywhere. Each field is
declared once with its row of the settings table (``stream.environment.setting``), in
groups by part; ``from_env`` reads them all, then checks what spans several.
"""

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stream.environment import (
    BATCHES,
    ENDPOINTS,
    GATEWAY,
    KAFKA,
    LIMITS,
    REDIS,
    SESSIONS,
    STATE,
    TOPICS,
    choice,
    duration,
    flag,
    integer,
    items,
    number,
    read,
    setting,
)
from stream.environment import ConfigError as ConfigError
from stream.kafka_security import KafkaSecurity as KafkaSecurity
from stream.session.limits import Limits

if TYPE_CHECKING:  # imported where used: `stream fold` needs no Redis layout
    from stream.output.layout import RedisLayout


@dataclass(frozen=True)
class Settings:
    """Every field in a group (``group=``; the gateway's own rest: stream.gateway.config)."""

    bootstrap_servers: str = setting(
        "KAFKA_BOOTSTRAP_SERVERS",
        "127.0.0.1:9092",
        group=KAFKA,
        help="comma-separated host:port",
        doc="comma-separated `host:port`",
        keep_empty=True,
    )
    kafka: KafkaSecurity = field(default_factory=KafkaSecurity)  # its own rows, read first
    app_id: str = setting(
        "STREAM_APP_ID",
        "context-stream",
        group=TOPICS,
        help="consumer group id and internal topic prefix",
    )
    input_topic: str = setting(
        "STREAM_INPUT_TOPIC",
        "dsh.session-events",
        group=TOPICS,
        help="session events, key = session id",
    )
    output_topic: str = setting(
        "STREAM_OUTPUT_TOPIC",
        "dsh.session-context",
        group=TOPICS,
        help="updates (compacted)",
    )
    dlq_topic: str = setting(  # unset: the input topic's name + .dlq (from_env)
        "STREAM_DLQ_TOPIC",
        "dsh.session-events.dlq",
        group=TOPICS,
        help="dead letters",
        shown="{STREAM_INPUT_TOPIC}.dlq",
    )
    partitions: int = setting(
        "STREAM_PARTITIONS",
        6,
        integer(1),
        group=TOPICS,
        help="partitions of topics the worker creates",
        doc="partitions for topics the worker creates (an existing input topic's count wins)",
    )
    replication_factor: int = setting(
        "STREAM_REPLICATION_FACTOR",
        1,
        integer(1),
        group=TOPICS,
        help="replicas of topics the worker creates",
    )
    state_dir: str = setting(
        "STREAM_STATE_DIR",
        ".state",
        group=STATE,
        help="RocksDB: one directory per worker process",
        doc="RocksDB and Faust data: one directory per worker process (RocksDB locks it)",
        keep_empty=True,
    )
    standby_replicas: int = setting(
        "STREAM_STANDBY_REPLICAS",
        0,
        integer(),
        group=STATE,
        help="warm table copies on other workers",
    )
    generation: int = setting(  # bump when rebuilding state, so rebuilt updates win in Redis
        "STREAM_GENERATION",
        1,
        integer(),
        group=STATE,
        help="floor of the rebuild generation",
        doc="floor of the rebuild generation (`stream replay --rebuild` advances it;"
        " no need to edit)",
    )
    worker_id: str = setting(  # names this worker's stats; unset: host-pid (from_env)
        "STREAM_WORKER_ID", "", group=STATE, help="names this worker in logs", shown="host-pid"
    )
    batch_max: int = setting(  # a batch grows with the backlog up to this (note 016)
        "STREAM_BATCH_MAX",
        10_000,
        integer(1),
        group=BATCHES,
        help="most records per batch",
        doc="most records per batch, holding at most 4× as many events, a segment counting its"
        " elements (a batch grows with a backlog up to it; the agent's queue"
        " holds two)",
    )
    batch_sessions: int = setting(
        "STREAM_BATCH_SESSIONS",
        100,
        integer(),
        group=BATCHES,
        help="sessions a batch's partitions hold together (0: all partitions)",
        doc="a batch takes whole partitions, longest waiting first, while together they hold"
        " at most this many sessions (at least one partition): a session waits for its own"
        " share of a busy worker's round, not all of it. A whole `STREAM_BATCH_MAX` batch"
        " waiting takes every partition again (throughput first; note 016). 0: every"
        " partition each batch",
    )
    producer_linger: float = setting(
        "STREAM_PRODUCER_LINGER",
        0.005,
        number(),
        group=BATCHES,
        help="producer linger",
        doc="producer linger: a batch's records leave in few requests",
        unit="s",
    )
    rocksdb_write_buffer: int = setting(
        "STREAM_ROCKSDB_WRITE_BUFFER",
        8 << 20,
        integer(1 << 20),
        group=BATCHES,
        help="bytes per RocksDB memtable (two per partition)",
        doc="bytes per RocksDB memtable, two per partition: bounds the write-ahead log and the"
        " memory of each partition's store (Faust's default is three of 64 MiB)",
    )
    keep_records: int = setting(
        "STREAM_KEEP_RECORDS",
        20_000,
        integer(),
        group=BATCHES,
        help="decoded sessions kept in memory (~1.5 KB)",
        doc="sessions whose decoded record stays in memory after their row is written (about"
        " 1.5 KB each), so their next batch folds on without decoding the row; 0 keeps none"
        " (note 016)",
    )
    latency_budget: float = setting(  # note 034
        "STREAM_LATENCY_BUDGET",
        0.01,
        number(0.001, 1.0),
        group=BATCHES,
        help="how long a fetch waits for more records while records arrive",
        doc="how long a fetch waits at the broker for more while records arrive: one fetch,"
        " fold, Redis write and produce per budget, so CPU follows the events; the latency"
        " an update may gain for it (a backlog comes back at once; note 034)",
        unit="s",
    )
    fetch_max_wait: float = setting(
        "STREAM_FETCH_MAX_WAIT",
        0.5,
        number(0.001, 30.0),
        group=BATCHES,
        help="how long an idle worker's fetch waits at the broker",
        doc="how long a fetch waits at the broker while no records arrive and none are"
        " pending: sets an idle worker's fetches a second (notes 016, 034)",
        unit="s",
    )
    isolation_level: str = setting(  # note 025
        "STREAM_ISOLATION_LEVEL",
        "read_committed",
        choice("read_committed", "read_uncommitted"),
        group=BATCHES,
        help="read_committed or read_uncommitted",
        doc="`read_committed` folds a transactional producer's events once it commits, never"
        " an aborted one's; `read_uncommitted` folds every record, aborted ones too (note 025)",
    )
    consumer_thread: bool = setting(  # off: the consumer on the worker's loop (note 023)
        "STREAM_CONSUMER_THREAD",
        False,
        flag,
        group=BATCHES,
        help="run the Kafka consumer on a thread of its own (Faust's way)",
        doc="`1`: the Kafka consumer runs on a thread and loop of its own, as Faust runs it;"
        " by default on the worker's loop, a thread hand-over sooner (note 023)",
    )
    switch_interval: float = setting(  # sys.setswitchinterval (stream.runtime.tune_switch)
        "STREAM_SWITCH_INTERVAL",
        0.0005,
        number(0.0001, 0.1),
        group=BATCHES,
        help="longest a thread holds the interpreter while another waits",
        doc="longest the worker's loop holds the interpreter while another thread waits: the"
        " restore's writers, and with `STREAM_CONSUMER_THREAD=1` Faust's consumer thread,"
        " to read a fetch (CPython's own 5 ms put every fetch milliseconds behind on a busy"
        " loop; note 022)",
        unit="s",
    )
    commit_interval: float = setting(
        "STREAM_COMMIT_INTERVAL",
        2.8,
        number(),
        group=BATCHES,
        help="offset commit interval",
        unit="s",
    )
    session_timeout: float = setting(  # sized in note 027
        "STREAM_SESSION_TIMEOUT",
        15.0,
        number(),
        group=BATCHES,
        help="how long the group waits for a worker that stopped without leaving",
        doc="consumer-group session timeout: how long the group keeps a worker's partitions"
        " for it after it stopped without leaving (a crash); back within it, a static member"
        " takes them back without a rebalance, past it they move"
        " ([note 027](docs/notes/027-static-membership.md)); 6 s is the broker's minimum",
        unit="s",
    )
    heartbeat_interval: float = setting(  # how soon a member hears of a rebalance (note 027)
        "STREAM_HEARTBEAT_INTERVAL",
        1.0,
        number(0.1, 600.0),
        group=BATCHES,
        help="heartbeat to the group coordinator",
        doc="heartbeat to the group coordinator, at most a third of the session timeout: a"
        " member learns of a rebalance on its next heartbeat, so this bounds how long the"
        " others take to join one",
        unit="s",
    )
    static_membership: bool = setting(  # KIP-345 (note 027)
        "STREAM_STATIC_MEMBERSHIP",
        True,
        flag,
        group=BATCHES,
        help="join the group as a static member named by its instance id",
        doc="`1`: the worker joins its group as a static member (KIP-345) named"
        " `STREAM_GROUP_INSTANCE_ID`, so a worker that crashes and is back within the session"
        " timeout takes its own partitions back and nobody else pauses; `0`: a dynamic member,"
        " every restart a rebalance ([note 027](docs/notes/027-static-membership.md))",
    )
    group_instance_id: str = setting(  # unset: STREAM_WORKER_ID when set (from_env)
        "STREAM_GROUP_INSTANCE_ID",
        "",
        group=BATCHES,
        help="this worker's static member id, unique in the group",
        doc="this worker's static member id: unique in the group (a second process with the"
        " same id fences the first) and the same across its restarts (the chart: the pod"
        " name); unset and no `STREAM_WORKER_ID`: a dynamic member",
        shown="STREAM_WORKER_ID",
    )
    leave_on_stop: bool = setting(  # a static member leaves on SIGTERM too (note 027)
        "STREAM_LEAVE_ON_STOP",
        True,
        flag,
        group=BATCHES,
        help="a graceful stop leaves the group at once (0: the group waits for the worker)",
        doc="`1`: a graceful stop (SIGTERM) leaves the group at once (LeaveGroup with the"
        " instance id), so a scale-down's partitions move within seconds; `0`: the group"
        " keeps them for the session timeout, for a restart without a rebalance, and a"
        " scale-down needs `stream leave` ([note 027](docs/notes/027-static-membership.md))",
    )
    max_poll_interval: float = setting(  # a held batch must not drop the worker from its group
        "STREAM_MAX_POLL_INTERVAL",
        3600.0,
        number(),
        group=BATCHES,
        help="longest time between polls before the group drops a member",
        unit="s",
    )
    max_message_bytes: int = setting(
        "STREAM_MAX_MESSAGE_BYTES",
        1_000_000,
        integer(1024),
        group=LIMITS,
        help="an input message",
        doc="larger input messages are dead-lettered",
    )
    max_inflated_bytes: int = setting(  # per partition and fetch (stream.app.inflate)
        "STREAM_MAX_INFLATED_BYTES",
        4_000_000,
        integer(1 << 16),
        group=LIMITS,
        help="a compressed record batch, inflated",
        doc="a compressed input batch is inflated up to this many bytes; past it (a"
        " decompression bomb) its records are dead-lettered unread, and one fetch inflates at"
        " most this much per partition ([reliability](docs/reliability.md#hostile-inputs))",
    )
    max_buffered_bytes: int = setting(  # beside the record count the agent's queue holds
        "STREAM_MAX_BUFFERED_BYTES",
        32 * 1024 * 1024,
        integer(1 << 20),
        group=LIMITS,
        help="input waiting for a batch, in bytes",
        doc="input bytes handed to the agent and not yet in a batch, on the queue and waiting"
        " for a turn each: with the inflate bound, what keeps the worker's memory bounded"
        " whatever the records hold",
    )
    max_event_bytes: int = setting(
        "STREAM_MAX_EVENT_BYTES",
        1_000_000,
        integer(1024),
        group=LIMITS,
        help="one event, as compact JSON",
        doc="larger events are dead-lettered (a segment's element as compact JSON; only that"
        " element)",
    )
    max_key_bytes: int = setting(
        "STREAM_MAX_KEY_BYTES",
        1_024,
        integer(1),
        group=LIMITS,
        help="a session id",
        doc="longer session ids are dead-lettered",
    )
    max_segment_events: int = setting(
        "STREAM_MAX_SEGMENT_EVENTS",
        10_000,
        integer(1),
        group=LIMITS,
        help="events in one segment",
        doc="longer segments are dead-lettered",
    )
    max_system_prompts: int = setting(
        "STREAM_MAX_SYSTEM_PROMPTS",
        1_000,
        integer(1),
        group=LIMITS,
        help="retained system prompts per session",
        doc="retained system prompts per session before `contextBreakdown` faults",
    )
    max_error_chars: int = setting(
        "STREAM_MAX_ERROR_CHARS",
        500,
        integer(80),
        group=LIMITS,
        help="fault and dead-letter reasons",
        doc="fault and dead-letter reasons are cut to this length",
    )
    resets: bool = setting(  # off: no producer to the input topic can start a session over
        "STREAM_RESETS",
        False,
        flag,
        group=SESSIONS,
        help="take reset records (`stream produce --reset`) from the input topic",
        doc="`1` takes reset records (`stream produce --reset`) from the input topic, and only"
        " for a generation claimed for resets on the control topic (any other is"
        " dead-lettered); `0`"
        " (the default) dead-letters every reset, so no producer can start a session over"
        " ([operations](docs/operations.md))",
    )
    session_ttl_seconds: int = setting(  # 7 days: the input's retention, replay's horizon
        "STREAM_SESSION_TTL",
        7 * 86400,
        duration,
        group=SESSIONS,
        help="idle time (event time) before a session expires; 7d, 12h, 90m; 0: never",
        doc="sessions idle this long in event time expire everywhere (RocksDB, changelog,"
        " output topic, Redis); `7d`, `12h`, `90m` or seconds, `0` keeps them for good"
        " ([docs/operations.md](docs/operations.md#session-expiry))",
        unit="s",
    )
    stall_seconds: float = setting(
        "STREAM_STALL_SECONDS",
        60.0,
        number(),
        group=SESSIONS,
        help="a committed offset standing still this long while records wait: stalled",
        doc="a partition whose committed offset stands still this long while records wait is"
        " reported stalled (`stream_partition_stalled`, `/readyz`)",
        unit="s",
    )
    redis_url: str = setting(
        "REDIS_URL",
        "redis://127.0.0.1:6379/0",
        group=REDIS,
        help="redis:// or rediss:// (TLS); a password is never logged",
        doc="`rediss://` for TLS; a password in it never reaches logs",
        keep_empty=True,
        secret=True,  # may embed a password
    )
    redis_username: str | None = setting(
        "REDIS_USERNAME", None, group=REDIS, help="Redis AUTH user (ACL)"
    )
    redis_password: str | None = setting(
        "REDIS_PASSWORD", None, group=REDIS, help="Redis AUTH password", secret=True
    )
    redis_tls_cafile: str | None = setting(
        "REDIS_TLS_CAFILE",
        None,
        group=REDIS,
        help="CA bundle (needs rediss://)",
    )
    redis_loader_url: str = setting(  # who loads the worker's function library
        "REDIS_LOADER_URL",
        "",
        group=REDIS,
        help="a user allowed FUNCTION LOAD",
        doc="a user allowed `FUNCTION LOAD` (credentials in this URL): loads the worker's"
        " Redis function library when Redis lacks it"
        " ([note 005](docs/notes/005-redis-layout-and-guard.md))",
        shown="REDIS_URL's user",
        keep_empty=True,
        secret=True,  # may embed a password
    )
    redis_key_prefix: str = setting(
        "REDIS_KEY_PREFIX",
        "ctx:",
        group=REDIS,
        help="prefix of every key and channel",
        keep_empty=True,
    )
    redis_ttl_seconds: int = setting(
        "REDIS_TTL_SECONDS",
        0,
        integer(),
        group=REDIS,
        help="expire idle sessions' keys (0: never)",
        unit="s",
    )
    redis_cluster: bool = setting(  # the sharded layout (output.layout)
        "REDIS_CLUSTER",
        False,
        flag,
        group=REDIS,
        help="REDIS_URL is a node of a Redis Cluster",
        doc="`1`: `REDIS_URL` is a node of a Redis Cluster (7+); sharded keys and channels"
        " ([note 014](docs/notes/014-redis-cluster.md))",
    )
    reseed_on_assign: bool = setting(  # guarded (note 005)
        "STREAM_RESEED_ON_ASSIGN",
        True,
        flag,
        group=REDIS,
        help="republish assigned partitions' rows to Redis after a rebalance",
    )
    redis_check_interval: float = setting(
        "STREAM_REDIS_CHECK_INTERVAL",
        5.0,
        number(),
        group=REDIS,
        help="how often the worker checks Redis still holds its data",
        unit="s",
    )
    # Updates queued while Redis is away, before batches are held: sessions, and their
    # estimated bytes (payloads + ~320 B each). 256 MiB: the chart requests 512 MiB for a
    # worker's steady state and limits it to 1 GiB; the queue takes at most a quarter of
    # the limit, leaving the rest for the held batch, allocator slack and estimate error.
    redis_max_pending: int = setting(
        "STREAM_REDIS_MAX_PENDING",
        500_000,
        integer(1),
        group=REDIS,
        help="sessions queued while Redis is away before batches are held",
        doc="sessions queued while Redis is away before batches are held (released under half)",
    )
    redis_max_pending_bytes: int = setting(
        "STREAM_REDIS_MAX_PENDING_BYTES",
        256 * 1024 * 1024,
        integer(1 << 20),
        group=REDIS,
        help="that queue's bytes before batches are held",
        doc="the queue's estimated bytes before batches are held (released under half); at"
        " least 1 MiB",
    )
    metrics_port: int = setting(
        "STREAM_METRICS_PORT",
        9102,
        integer(),
        group=ENDPOINTS,
        help="/metrics, /livez, /readyz (0: off)",
        doc="`/metrics`, `/livez`, `/readyz`; 0 turns them off",
    )
    metrics_bind: str = setting(  # probes and Prometheus scrape from outside the pod
        "STREAM_METRICS_BIND",
        "0.0.0.0",
        group=ENDPOINTS,
        help="their listen address",
        keep_empty=True,
    )
    log_format: str = setting(
        "STREAM_LOG_FORMAT",
        "text",
        choice("text", "json"),
        group=ENDPOINTS,
        help="text or json",
        doc="or `json` (one object per line)",
    )
    web_enabled: bool = setting(  # off so workers can share a host
        "STREAM_WEB_ENABLED", False, flag, group=ENDPOINTS, help="Faust's own web server"
    )
    web_port: int = setting(
        "STREAM_WEB_PORT",
        6066,
        integer(1),
        group=ENDPOINTS,
        help="its port (bound to 127.0.0.1)",
    )
    gateway_port: int = setting(
        "STREAM_GATEWAY_PORT",
        8080,
        integer(),
        group=GATEWAY,
        help="`stream serve`'s port",
    )
    gateway_bind: str = setting(
        "STREAM_GATEWAY_BIND",
        "127.0.0.1",
        group=GATEWAY,
        help="`stream serve`'s listen address",
        keep_empty=True,
    )
    gateway_cors_origins: tuple[str, ...] = setting(
        "STREAM_GATEWAY_CORS_ORIGINS",
        (),
        items,
        group=GATEWAY,
        help="origins allowed to call the gateway",
        doc="comma-separated origins allowed to call the gateway (`*` for any)",
    )

    @property
    def instance_id(self) -> str | None:
        """The static member id the worker joins its group with; None: a dynamic member."""
        return self.group_instance_id if self.static_membership and self.group_instance_id else None

    @property
    def redis_layout(self) -> "RedisLayout":
        from stream.output.layout import RedisLayout

        return RedisLayout(self.redis_key_prefix, cluster=self.redis_cluster)

    @property
    def limits(self) -> Limits:
        """The bounds every fold runs under, the worker's and the offline tools' alike."""
        return Limits(
            message_bytes=self.max_message_bytes,
            event_bytes=self.max_event_bytes,
            key_bytes=self.max_key_bytes,
            segment_events=self.max_segment_events,
            error_chars=self.max_error_chars,
            dead_letter_bytes=min(self.max_message_bytes, 900_000),
            resets=self.resets,
            reset_generations=(),  # until the control topic claims some (Claims)
            system_prompts=self.max_system_prompts,
            session_ttl=self.session_ttl_seconds * 1000,
        )

    def librdkafka(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap_servers} | self.kafka.librdkafka()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        env = os.environ if env is None else env
        kafka = KafkaSecurity(**read(KafkaSecurity, env))
        if kafka.uses_sasl and not (kafka.sasl_username and kafka.sasl_password):
            raise ConfigError(f"{kafka.protocol} needs KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD")
        # What spans several variables is checked first, in this order, as it always was.
        redis = read(cls, env, ("redis_url", "redis_tls_cafile"))
        if redis.get("redis_tls_cafile") and not redis.get("redis_url", "").startswith("rediss://"):
            raise ConfigError("REDIS_TLS_CAFILE needs a rediss:// REDIS_URL (TLS)")
        redis = read(cls, env, ("redis_cluster", "redis_key_prefix"))
        prefix = redis.get("redis_key_prefix", cls.redis_key_prefix)
        if redis.get("redis_cluster") and ("{" in prefix or "}" in prefix):
            raise ConfigError("REDIS_KEY_PREFIX must hold no '{' or '}' with REDIS_CLUSTER")
        values = read(cls, env)
        values.setdefault("dlq_topic", f"{values.get('input_topic', cls.input_topic)}.dlq")
        if "worker_id" in values:  # a host-pid id is new on every start: no static member
            values.setdefault("group_instance_id", values["worker_id"])
        values.setdefault("worker_id", f"{socket.gethostname()}-{os.getpid()}")
        return cls(kafka=kafka, **values)
