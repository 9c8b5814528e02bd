"""Keeps the worker's Redis function library loaded: ``python -m stream.publish.loader``.

The worker's Redis user may only ``FCALL`` its functions (note 005). When Redis comes back
empty (a restart without persistence, a failover to an empty replica, ``FUNCTION FLUSH``)
the library is gone and the worker waits, its updates queued, until someone loads it. This
loop is that someone: every ``STREAM_LOADER_INTERVAL`` seconds (5) it asks Redis — every
master of a Redis Cluster — whether the library this code expects (``LIBRARY_NAME``) is
there, and loads it (``FUNCTION LOAD REPLACE``) when it is not, logging each load.

It connects as ``REDIS_LOADER_URL``'s user, or, unset, as ``REDIS_URL`` with
``REDIS_USERNAME``/``REDIS_PASSWORD`` (how the chart's loader sidecar passes the loader's
credentials), with the worker's TLS and cluster settings (``REDIS_TLS_CAFILE``,
``REDIS_CLUSTER``). That user needs ``FUNCTION LOAD`` and ``FUNCTION LIST`` and no key
(helm/context-stream/files/redis-acl.conf, ``context-stream-loader``).

Redis away, or refusing for a while, is waited out. It exits non-zero only on a bad
configuration: a setting that does not parse (status 2), or a user Redis refuses
(a wrong password, no ``FUNCTION LOAD``/``LIST``; status 3), which no retry fixes.
"""

import argparse
import asyncio
import logging
import logging.config
import os
import signal
import sys
from collections.abc import Mapping

from redis import exceptions as rx

from stream.config import ConfigError, Settings
from stream.contract.errors import safe_text
from stream.publish.library import LIBRARY_NAME
from stream.publish.redis_sink import (
    Client,
    connect,
    lacking_library,
    load_library,
    outage_kind,
)
from stream.runtime import json_logging

log = logging.getLogger("stream.loader")

INTERVAL = 5.0  # s between checks (STREAM_LOADER_INTERVAL)


class Refused(RuntimeError):
    """Redis refuses this user what the loader needs: a bad configuration."""


def interval_of(env: Mapping[str, str]) -> float:
    """``STREAM_LOADER_INTERVAL``: seconds between checks, at least 0.1."""
    raw = env.get("STREAM_LOADER_INTERVAL", "")
    try:
        value = float(raw) if raw else INTERVAL
    except ValueError:
        raise ConfigError(f"STREAM_LOADER_INTERVAL must be a number, got {raw!r}") from None
    if not 0.1 <= value <= 3600:
        raise ConfigError(f"STREAM_LOADER_INTERVAL must be between 0.1 and 3600, got {value:g}")
    return value


async def ensure_loaded(client: Client) -> list[str]:
    """Load the library where it is missing; returns the servers it was loaded on (none:
    it was everywhere already). ``FUNCTION LOAD REPLACE`` goes to every master of a
    cluster: loading where it is already there changes nothing."""
    lacking = await lacking_library(client)
    if lacking:
        await load_library(client)
    return lacking


async def keep_loaded(settings: Settings, interval: float, stop: asyncio.Event) -> None:
    """Check and load now and every ``interval`` seconds until ``stop`` is set. Raises
    ``Refused`` when Redis refuses this user (no retry fixes that); waits out the rest."""
    client = connect(settings, "stream-loader", settings.redis_loader_url)
    away = ""  # the current outage's kind, logged once
    try:
        while True:
            try:
                loaded = await ensure_loaded(client)
            except (rx.AuthenticationError, rx.AuthorizationError, rx.NoPermissionError) as error:
                raise Refused(str(error)) from error
            except Exception as error:
                kind = outage_kind(error)
                if kind is None:  # anything else Redis answers: say it, do not loop on it
                    raise Refused(str(error)) from error
                if kind != away:
                    log.warning(
                        "loader: redis %s (%s); checking again every %g s",
                        kind,
                        safe_text(str(error), 300),
                        interval,
                    )
                away = kind
            else:
                if away:
                    log.info("loader: redis answers again")
                away = ""
                if loaded:
                    log.warning(
                        "loader: loaded the function library %s (it was missing on %s)",
                        LIBRARY_NAME,
                        ", ".join(loaded),
                    )
            try:
                await asyncio.wait_for(stop.wait(), interval)
                return
            except TimeoutError:
                pass
    finally:
        await client.aclose()


async def _run(settings: Settings, interval: float) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "loader: keeping the function library %s loaded (checked every %g s)",
        LIBRARY_NAME,
        interval,
    )
    await keep_loaded(settings, interval, stop)


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(
        prog="python -m stream.publish.loader",
        description="Keep the worker's Redis function library loaded: check every"
        " STREAM_LOADER_INTERVAL seconds (5) and FUNCTION LOAD REPLACE it where it is missing"
        " (every master of a cluster). Reads REDIS_LOADER_URL (else REDIS_URL with"
        " REDIS_USERNAME and REDIS_PASSWORD), REDIS_TLS_CAFILE, REDIS_CLUSTER,"
        " STREAM_LOG_FORMAT. Exits 2 on a setting that does not parse, 3 when Redis refuses"
        " the user; waits out Redis being away.",
    ).parse_args(argv)
    try:
        settings = Settings.from_env()
        interval = interval_of(os.environ)
    except ConfigError as error:
        print(f"loader: {error}", file=sys.stderr)
        return 2
    if settings.log_format == "json":
        logging.config.dictConfig(json_logging("INFO"))
    else:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    try:
        asyncio.run(_run(settings, interval))
    except Refused as error:
        print(
            f"loader: Redis refuses this user ({safe_text(str(error), 300)}): give it"
            " +function|load and +function|list (helm/context-stream/files/redis-acl.conf,"
            " context-stream-loader) and check its password",
            file=sys.stderr,
        )
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
