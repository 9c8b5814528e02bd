"""``stream watch``: the context meter in the terminal, live from Redis pub/sub.

- ``stream watch SESSION`` draws one session's meter (ring and percent, the
  ``~used / capacity`` headline, the segmented bar, ``~`` rows, usage totals, faults)
  and redraws it on every update;
- ``stream watch`` shows a live table of the most recently updated sessions
  (``{prefix}recent``, then every update seen by a ``PSUBSCRIBE``; in cluster mode the
  shards' recent sets merged, then every shard's feed channel by ``SSUBSCRIBE``);
- ``--json`` prints each update's raw JSON, one per line; when stdout is not a terminal
  (or with ``--lines``) one human line per update (``describe``).

Drawing is a pure function of the update (``render_meter``, ``render_sessions``); this
module only moves updates from Redis to the screen.

Everything an update (or the command line) brings is untrusted text: it is drawn as rich
``Text`` (never parsed as markup, so a session id such as ``x[/]`` is just text) and passed
through ``printable`` first, which writes control characters as visible escapes, so an id
holding an ESC sequence, a newline or ``\x00`` cannot move the cursor, recolour or clear
the terminal, or break the layout.
"""

import argparse
import math
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import orjson
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from stream.cli.reach import REDIS_ENV, connect_redis, environment
from stream.config import ConfigError, Settings
from stream.gateway.meter import Meter, bar_cells, meter
from stream.gateway.sse import seq_of
from stream.output.layout import newest
from stream.output.redis import UPDATE_FIELD, is_expiry
from stream.redis_client import sync_client

RING: Final = "○◔◑◕●"
LEVEL_STYLE: Final = {"ok": "bold medium_purple1", "warn": "bold yellow", "high": "bold red"}
SEGMENT_STYLE: Final = {
    "systemTokens": "medium_purple1",
    "toolsTokens": "orange1",
    "messageTokens": "deep_sky_blue1",
}
FAULT_STYLE: Final = "bold white on red"
BAR_WIDTH: Final = 56

# C0 controls, DEL, C1 controls (U+009B is a one-byte CSI for some terminals), line and
# paragraph separators, the bidirectional overrides and isolates (they reorder what
# follows them), and lone surrogates (they cannot be encoded for the terminal).
_UNSAFE_IN_JSON: Final = "\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_CONTROL: Final = re.compile(f"[\x00-\x1f{_UNSAFE_IN_JSON}\ud800-\udfff]")
_NAMED: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# The ones JSON may hold raw (only inside strings: C0 controls never appear raw in valid
# JSON, and a parsed payload holds no lone surrogate): a JSON escape is the same string.
_JSON_RAW: Final = re.compile(f"[{_UNSAFE_IN_JSON}]")


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "watch",
        help="the context meter of a session (or a table of recent sessions), live from Redis",
        description="Show one session's context meter, redrawn on every update, or (without"
        " SESSION) a live table of the recently updated sessions, read from Redis pub/sub."
        " Off a terminal, or with --lines, one line per update. Exits 1 within seconds when"
        " Redis cannot be reached.",
        epilog=environment(REDIS_ENV),
    )
    parser.add_argument("session", nargs="?", help="a session id (default: all sessions)")
    parser.add_argument("--session", dest="session_option", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, help="stop after this many seconds")
    parser.add_argument("--json", action="store_true", help="print the raw update JSON lines")
    parser.add_argument(
        "--lines", action="store_true", help="one line per update, even on a terminal"
    )
    parser.add_argument(
        "--limit", type=int, default=20, metavar="N", help="sessions in the table (default 20)"
    )
    parser.add_argument(
        "--changed",
        action="store_true",
        help="with lines: only updates whose figures changed (not a later seq with the same"
        " figures); what Redis holds when it starts counts as shown",
    )
    parser.set_defaults(run=run)


# -- rendering (pure) --------------------------------------------------------------------
def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: object) -> str:
    """``text`` fit for a terminal: every control character (C0, DEL, C1, line separators,
    bidirectional overrides, lone surrogates) written as a visible escape (``\\x1b``,
    ``\\n``, ``\\u202e``), so it shows what is there instead of acting on the terminal."""
    return _CONTROL.sub(_escape, str(text))


def json_line(payload: str) -> str:
    """A JSON text with the characters ``printable`` escapes, and that JSON may hold raw,
    written as JSON escapes (``\\u009b``): the same JSON value, safe on a terminal."""
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", payload)


def _n(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


def _used(value: int | None) -> str:
    return "—" if value is None else f"~{value:,}"


def ring_glyph(percent: float | None) -> str:
    if percent is None or percent <= 0:
        return RING[0]
    return RING[min(4, math.ceil(percent / 25))]


def percent_text(percent: float | None) -> str:
    return "—" if percent is None else f"{percent:.1f}%"


def _bar(model: Meter, width: int) -> Text:
    segments = model.segments
    if not segments:
        return Text("─" * width, style="dim")
    bar = Text()
    for segment, cells in zip(segments, bar_cells(segments, width), strict=True):
        bar.append("━" * cells, style=SEGMENT_STYLE[segment.key])
    return bar


def _headline(model: Meter) -> Text:
    line = Text()
    line.append(f"{ring_glyph(model.percent)} ", style=LEVEL_STYLE[model.level])
    line.append(percent_text(model.percent), style=LEVEL_STYLE[model.level])
    line.append("   ")
    line.append(_used(model.used), style="bold")
    line.append(f" / {_n(model.capacity)} tokens", style="dim")
    return line


def _subline(model: Meter) -> Text:
    if model.pressure is None or model.used is None:
        text = "no provider sample yet"
    else:
        moved = model.used - model.pressure
        text = f"provider's last prompt {model.pressure:,}, {moved:+,} since"
    if model.capacity is None:
        text += " · window not reported yet"
    return Text(text, style="dim")


def _faults(model: Meter) -> list[Text]:
    return [
        Text(
            f" ⚠ FAULT {printable(fault.projection)} at seq {_n(fault.seq)}:"
            f" {printable(fault.error)} ",
            style=FAULT_STYLE,
        )
        for fault in model.faults
    ]


def render_meter(update: Mapping[str, Any], width: int = BAR_WIDTH) -> Panel:
    """One session's meter as a rich panel."""
    model = meter(update)
    rows = Text()
    for i, row in enumerate(model.rows):
        if i:
            rows.append("    ")
        rows.append("■ ", style=SEGMENT_STYLE[row.key])
        rows.append(f"~{row.tokens:,}", style="bold")
        rows.append(f" {row.label}", style="dim")
    usage = Table.grid(padding=(0, 3))
    for _ in model.usage:
        usage.add_column(justify="left")
    usage.add_row(*(Text(label, style="dim") for label, _ in model.usage))
    usage.add_row(*(Text(f"{tokens:,}", style="bold") for _, tokens in model.usage))
    parts: list[RenderableType] = [
        *_faults(model),
        _headline(model),
        _subline(model),
        _bar(model, width),
        rows,
        Text(""),
        Text("billed usage", style="dim underline"),
        usage,
    ]
    faulted = bool(model.faults)
    return Panel(
        Group(*parts),
        title=Text.assemble((printable(model.session_id), "bold"), f"  seq {_n(model.seq)}"),
        title_align="left",
        border_style="red" if faulted else LEVEL_STYLE[model.level].removeprefix("bold "),
        expand=False,
        subtitle=Text("FAULTED", style="bold red") if faulted else None,
    )


def render_waiting(session_id: str) -> Panel:
    return Panel(Text(f"waiting for the first update of {printable(session_id)} …", style="dim"))


def _ago(updated_ms: int | None, now_ms: int) -> str:
    if updated_ms is None:
        return "—"
    seconds = max(0, (now_ms - updated_ms) // 1000)
    if seconds < 60:
        return f"{seconds}s ago"
    if seconds < 3600:
        return f"{seconds // 60}m ago"
    return f"{seconds // 3600}h ago"


def render_sessions(rows: Sequence[tuple[Mapping[str, Any], int | None]], now_ms: int) -> Table:
    """The most recently updated sessions, in the order given: ``(update, updated ms)``."""
    table = Table(title="recently updated sessions", title_justify="left", expand=False, box=None)
    table.add_column("", no_wrap=True)
    table.add_column("session", no_wrap=True, overflow="ellipsis", max_width=40)
    table.add_column("ctx", justify="right")
    table.add_column("~used / capacity", justify="right")
    table.add_column("seq", justify="right")
    table.add_column("updated", justify="right")
    table.add_column("faults")
    for update, updated_ms in rows:
        model = meter(update)
        style = LEVEL_STYLE[model.level]
        faults = (
            Text(", ".join(printable(f.projection) for f in model.faults), style=FAULT_STYLE)
            if model.faults
            else Text("")
        )
        table.add_row(
            Text(ring_glyph(model.percent), style=style),
            Text(printable(model.session_id)),  # Text: never read as markup
            Text(percent_text(model.percent), style=style),
            Text(f"{_used(model.used)} / {_n(model.capacity)}"),
            Text(_n(model.seq)),
            Text(_ago(updated_ms, now_ms)),
            faults,
        )
    if not rows:
        table.caption = "no updates yet"
    return table


def figures(update: Mapping[str, Any]) -> bytes:
    """What a reader sees change in an update: all of it but its position (``seq``) and
    event time. Two updates with the same figures print the same line but for ``seq``."""
    kept = {key: value for key, value in update.items() if key not in ("seq", "time")}
    return orjson.dumps(kept, option=orjson.OPT_SORT_KEYS)


class Changes:
    """``--changed``: the figures last shown per session, to skip an update that repeats
    them. Bounded: past ``limit`` sessions the oldest entries are forgotten (one of them
    may then print a repeat, never miss a change)."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self.shown: dict[str, bytes] = {}

    def new(self, session_id: str, update: Mapping[str, Any]) -> bool:
        """Whether ``update`` changes what was shown for ``session_id`` (and remember it)."""
        mark = figures(update)
        if self.shown.get(session_id) == mark:
            return False
        self.shown.pop(session_id, None)  # re-inserted last: the dict's order is recency
        self.shown[session_id] = mark
        while len(self.shown) > self.limit:
            del self.shown[next(iter(self.shown))]
        return True

    def forget(self, session_id: str) -> None:
        self.shown.pop(session_id, None)


def describe(update: Mapping[str, Any]) -> str:
    """One human line for an update: occupancy first, then composition and usage.

    Read through the meter model, so a malformed update prints (``—``, ``0``) instead of
    raising, and every text it brings goes through ``printable``."""
    model = meter(update)
    projected, window = model.used, model.capacity
    if projected is not None and window:
        occupancy = f"{projected:>9,}/{window:,} ({100 * projected / window:4.1f}%)"
    elif projected is not None:
        occupancy = f"{projected:>9,}/?"
    else:
        occupancy = "no sample yet"
    sys_, tools, msgs = (row.tokens for row in model.rows)
    uncached, output, read, write = (tokens for _, tokens in model.usage)
    line = (
        f"{printable(model.session_id)} seq {_n(model.seq)}  ctx {occupancy}"
        f"  ~sys {sys_:,} ~tools {tools:,} ~msgs {msgs:,}"
        f"  in {uncached:,} out {output:,} cache r/w {read:,}/{write:,}"
    )
    for fault in model.faults:
        line += f"  FAULT {printable(fault.projection)}@{_n(fault.seq)}: {printable(fault.error)}"
    return line


# -- Redis to screen ---------------------------------------------------------------------
def _load(payload: bytes) -> dict[str, Any] | None:
    try:
        update = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    return update if isinstance(update, dict) else None


class _Feed:
    """The watched channel(s), resubscribed after a lost connection: ``SUBSCRIBE``,
    ``PSUBSCRIBE`` or (cluster mode) ``SSUBSCRIBE``, per ``how``."""

    def __init__(self, client: Any, channels: Sequence[str], how: str = "subscribe") -> None:
        self.client = client
        self.channels = tuple(channels)
        self.how = how
        self.pubsub: Any = None

    def open(self) -> None:
        self.close()
        if self.how == "ssubscribe":
            # A failover may have moved the channels' slots: read the cluster's map again.
            self.client.nodes_manager.initialize()
        self.pubsub = self.client.pubsub()
        getattr(self.pubsub, self.how)(*self.channels)
        # Read the current values only once Redis confirms: nothing can fall in between.
        waiting = set(self.channels)
        deadline = time.monotonic() + 5.0
        while waiting:
            message = self._get(timeout=max(0.0, min(0.5, deadline - time.monotonic())))
            if message is None:
                if time.monotonic() >= deadline:
                    raise ConnectionError("no subscribe confirmation from Redis")
                continue
            if message["type"] == self.how:
                channel = message["channel"]
                waiting.discard(channel.decode() if isinstance(channel, bytes) else channel)

    def _get(self, timeout: float, ignore: bool = False) -> Any:
        sharded = self.how == "ssubscribe"
        get = self.pubsub.get_sharded_message if sharded else self.pubsub.get_message
        return get(ignore_subscribe_messages=ignore, timeout=timeout)

    def poll(self, timeout: float) -> tuple[str, bytes] | None:
        message = self._get(timeout, ignore=True)
        if message is None or message["type"] not in ("message", "pmessage", "smessage"):
            return None
        channel = message["channel"]
        return channel.decode(errors="replace"), message["data"]

    def close(self) -> None:
        if self.pubsub is not None:
            self.pubsub.close()
            self.pubsub = None


def _follow(
    feed: _Feed,
    resync: Callable[[], None],
    handle: Callable[[str, bytes], None],
    tick: Callable[[], None],
    deadline: float | None,
) -> None:
    """Pump updates into ``handle`` until the deadline, reconnecting on Redis errors."""
    import redis

    connected = False
    while deadline is None or time.monotonic() < deadline:
        try:
            if not connected:
                feed.open()
                resync()
                connected = True
            message = feed.poll(0.25)
            if message is not None:
                handle(*message)
        except (redis.RedisError, OSError) as error:
            connected = False
            print(
                f"stream watch: Redis connection lost ({printable(error)}); retrying",
                file=sys.stderr,
            )
            time.sleep(1.0)
        tick()
    feed.close()


def run(args: argparse.Namespace) -> int:
    try:
        settings = Settings.from_env()
    except ConfigError as error:
        print(f"stream: configuration error: {error}", file=sys.stderr)
        return 2
    reached = connect_redis("watch", settings)
    if reached is None:
        return 1
    reached.close()
    client: Any = sync_client(settings)
    deadline = None if args.seconds is None else time.monotonic() + args.seconds
    live = not args.json and not args.lines and sys.stdout.isatty()
    session = args.session or args.session_option
    try:
        if session:
            _watch_session(client, settings, session, args, live, deadline)
        else:
            _watch_all(client, settings, args, live, deadline)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a watch ends: exit 0, not the shell's 130 for a failure
    return 0


def _print_line(args: argparse.Namespace, payload: bytes, update: Mapping[str, Any]) -> None:
    if args.json:
        sys.stdout.write(json_line(payload.decode()) + "\n")
    else:
        sys.stdout.write(f"{time.strftime('%H:%M:%S')} {describe(update)}\n")
    sys.stdout.flush()


def _watch_session(
    client: Any,
    settings: Settings,
    session_id: str,
    args: argparse.Namespace,
    live: bool,
    deadline: float | None,
) -> None:
    key = settings.redis_layout.session_key(session_id)
    feed = _Feed(client, [key], "ssubscribe" if settings.redis_cluster else "subscribe")
    last: list[int] = []  # the seq shown last (a list: closures below update it)
    changes = Changes()
    display = Live(render_waiting(session_id), console=Console(), auto_refresh=False)

    def show(payload: bytes) -> None:
        update, seq = _load(payload), seq_of(payload)
        if update is not None and is_expiry(update):
            last.clear()  # its next life starts over from a lower seq
            changes.forget(session_id)
            if live:
                display.update(render_waiting(session_id), refresh=True)
            else:
                print(f"{printable(session_id)} expired", flush=True)
            return
        if update is None or seq is None or (last and seq <= last[0]):
            return  # not an update, or one already shown (a repair republish, a resync)
        last[:] = [seq]
        if args.changed and not live and not changes.new(session_id, update):
            return
        if live:
            display.update(render_meter(update), refresh=True)
        else:
            _print_line(args, payload, update)

    def resync() -> None:
        current = client.hget(key, UPDATE_FIELD)
        if current is not None:
            show(current)

    if live:
        with display:
            _follow(feed, resync, lambda _, payload: show(payload), lambda: None, deadline)
    else:
        _follow(feed, resync, lambda _, payload: show(payload), lambda: None, deadline)


def _watch_all(
    client: Any,
    settings: Settings,
    args: argparse.Namespace,
    live: bool,
    deadline: float | None,
) -> None:
    layout = settings.redis_layout
    if layout.cluster:  # no patterns for sharded channels: every shard's feed
        feed = _Feed(client, layout.feed_channels, "ssubscribe")
    else:
        feed = _Feed(client, [layout.session_pattern], "psubscribe")
    limit = max(1, args.limit)
    rows: dict[str, tuple[dict[str, Any], int | None]] = {}
    drawn = [0.0]  # when the table was last drawn (monotonic)
    changes = Changes()
    display = Live(render_sessions([], 0), console=Console(), auto_refresh=False)

    def draw() -> None:
        ordered = sorted(rows.values(), key=lambda row: row[1] or 0, reverse=True)[:limit]
        display.update(render_sessions(ordered, int(time.time() * 1000)), refresh=True)
        drawn[0] = time.monotonic()

    def resync() -> None:
        pages = client.pipeline(transaction=False)
        for recent_key in layout.recent_keys:
            pages.zrevrange(recent_key, 0, limit - 1, withscores=True)
        recent = newest(pages.execute(), limit)
        ids = [raw.decode(errors="replace") for raw, _ in recent]
        pipe = client.pipeline(transaction=False)
        for session_id in ids:
            pipe.hget(layout.session_key(session_id), UPDATE_FIELD)
        for session_id, (_, score), payload in zip(ids, recent, pipe.execute(), strict=True):
            update = None if payload is None else _load(payload)
            if update is not None:
                rows[session_id] = (update, int(score))
        if live:
            draw()

    def baseline() -> None:
        pages = client.pipeline(transaction=False)
        for recent_key in layout.recent_keys:
            pages.zrevrange(recent_key, 0, changes.limit - 1, withscores=True)
        ids = [raw.decode(errors="replace") for raw, _ in newest(pages.execute(), changes.limit)]
        pipe = client.pipeline(transaction=False)
        for session_id in ids:
            pipe.hget(layout.session_key(session_id), UPDATE_FIELD)
        for session_id, payload in zip(ids, pipe.execute(), strict=True):
            update = None if payload is None else _load(payload)
            if update is not None:
                changes.new(session_id, update)

    def handle(channel: str, payload: bytes) -> None:
        update = _load(payload)
        if update is None:
            return
        session_id = layout.session_id_of(channel)
        if session_id is None and layout.cluster:  # a shard's feed: the id is inside
            inside = update.get("sessionId")
            session_id = inside if isinstance(inside, str) else None
        if session_id is None:
            return
        if is_expiry(update):
            rows.pop(session_id, None)
            changes.forget(session_id)
            if not live:
                print(f"{printable(session_id)} expired", flush=True)
            return
        if not live:
            if not args.changed or changes.new(session_id, update):
                _print_line(args, payload, update)
            return
        rows[session_id] = (update, int(time.time() * 1000))
        if len(rows) > 4 * limit:  # keep memory bounded: forget the stalest
            for stale, _ in sorted(rows.items(), key=lambda r: r[1][1] or 0)[: len(rows) - limit]:
                del rows[stale]

    def tick() -> None:
        if live and time.monotonic() - drawn[0] >= 0.2:  # at most 5 redraws a second
            draw()

    if live:
        with display:
            _follow(feed, resync, handle, tick, deadline)
    else:
        # Lines mode prints what arrives from now on (no recent sessions); with --changed
        # what Redis holds counts as shown, so a repeat of it does not print.
        _follow(feed, baseline if args.changed else lambda: None, handle, tick, deadline)
