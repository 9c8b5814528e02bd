"""``stream watch``: print session updates as they arrive in Redis (one line each)."""

import argparse
import sys
import time
from typing import Any

import orjson

from stream.config import Settings


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "watch", help="follow session updates in Redis (REDIS_URL, REDIS_KEY_PREFIX)"
    )
    parser.add_argument("--session", help="only this session id")
    parser.add_argument("--seconds", type=float, help="stop after this many seconds")
    parser.add_argument("--json", action="store_true", help="print the raw update JSON")
    parser.set_defaults(run=run)


def describe(update: dict[str, Any]) -> str:
    """One human line for an update: occupancy first, then composition and usage."""
    pressure = update.get("contextPressure", {})
    breakdown = update.get("contextBreakdown", {})
    usage = update.get("tokenUsage", {})
    projected, window = pressure.get("projectedTokens"), pressure.get("contextWindow")
    if projected is not None and window:
        occupancy = f"{projected:>9,}/{window:,} ({100 * projected / window:4.1f}%)"
    elif projected is not None:
        occupancy = f"{projected:>9,}/?"
    else:
        occupancy = "no sample yet"
    line = (
        f"{update.get('sessionId')} seq {update.get('seq')}  ctx {occupancy}"
        f"  ~sys {breakdown.get('systemTokens', 0):,} ~tools {breakdown.get('toolsTokens', 0):,}"
        f" ~msgs {breakdown.get('messageTokens', 0):,}"
        f"  in {usage.get('uncachedInputTokens', 0):,} out {usage.get('outputTokens', 0):,}"
        f" cache r/w {usage.get('cacheReadTokens', 0):,}/{usage.get('cacheWriteTokens', 0):,}"
    )
    for name, fault in update.get("faults", {}).items():
        line += f"  FAULT {name}@{fault['seq']}: {fault['error']}"
    return line


def run(args: argparse.Namespace) -> int:
    import redis

    settings = Settings.from_env()
    client = redis.Redis.from_url(settings.redis_url)
    pubsub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
    if args.session:
        pubsub.subscribe(settings.session_key(args.session))
    else:
        pubsub.psubscribe(settings.session_key("*"))
    deadline = None if args.seconds is None else time.monotonic() + args.seconds
    out = sys.stdout
    try:
        while deadline is None or time.monotonic() < deadline:
            message = pubsub.get_message(timeout=0.5)
            if message is None:
                continue
            data = message["data"]
            if args.json:
                out.write(data.decode() + "\n")
            else:
                out.write(f"{time.strftime('%H:%M:%S')} {describe(orjson.loads(data))}\n")
            out.flush()
    finally:
        pubsub.close()
    return 0
