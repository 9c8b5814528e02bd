"""Settings from the environment: each setting is declared once, as a dataclass field
whose metadata is its row of the settings table (``setting``): the variable, how its text
is parsed, the part of the service it belongs to and what it means. ``read`` parses every
row of a class; ``stream.config`` (the worker's settings) and ``stream.gateway.config``
(the gateway's own) declare rows, ``stream.cli.settings`` draws the help and the README's
table from them (note 018).
"""

import re
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final


class ConfigError(ValueError):
    """A setting that cannot be used; the message names the variable."""


# -- parsers: (the variable's text, its name) -> the value; ConfigError names the variable --

Parse = Callable[[str, str], Any]


def text(raw: str, name: str) -> str:
    return raw


def upper(raw: str, name: str) -> str:
    return raw.upper()


def integer(minimum: int = 0) -> Parse:
    def parse(raw: str, name: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
        if value < minimum:
            raise ConfigError(f"{name} must be at least {minimum}, got {value}")
        return value

    return parse


def number(low: float | None = None, high: float | None = None) -> Parse:
    """A float; with bounds, one between them (both inclusive)."""

    def parse(raw: str, name: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"{name} must be a number, got {raw!r}") from None
        if low is not None and high is not None and not low <= value <= high:
            raise ConfigError(f"{name} must be between {low:g} and {high:g}, got {value:g}")
        return value

    return parse


def seconds(minimum: float = 0.0) -> Parse:
    """A finite number of seconds, at least ``minimum`` (the gateway's timeouts)."""

    def parse(raw: str, name: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"{name} must be a number of seconds, got {raw!r}") from None
        if not minimum <= value < float("inf"):  # also refuses NaN
            raise ConfigError(f"{name} must be at least {minimum:g}, got {raw!r}")
        return value

    return parse


def flag(raw: str, name: str) -> bool:
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be 1/0, true/false, yes/no or on/off, got {raw!r}")


def choice(*allowed: str) -> Parse:
    def parse(raw: str, name: str) -> str:
        value = raw.lower()
        if value not in allowed:
            raise ConfigError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        return value

    return parse


_DURATION = re.compile(r"([0-9]+)([smhd]?)")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(raw: str, name: str) -> int:
    """Seconds in ``7d``, ``12h``, ``90m``, ``30s`` or plain seconds."""
    found = _DURATION.fullmatch(raw.strip().lower())
    if found is None:
        raise ConfigError(f"{name} must be a duration like 7d, 12h, 90m or seconds, got {raw!r}")
    return int(found.group(1)) * _UNITS[found.group(2)]


def items(raw: str, name: str) -> tuple[str, ...]:
    """A comma-separated list, each item stripped, empty ones dropped."""
    return tuple(item.strip() for item in raw.split(",") if item.strip())


PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def protocol(raw: str, name: str) -> str:
    value = raw.upper()
    if value not in PROTOCOLS:
        raise ConfigError(f"{name}: unknown protocol {value!r}")
    return value


# -- the table ------------------------------------------------------------------------------

# The parts settings are grouped by, in the order help and README list them.
KAFKA: Final = "Kafka"
TOPICS: Final = "Topics and group"
STATE: Final = "State"
BATCHES: Final = "Batches and fetches"
LIMITS: Final = "Limits (past one, input is dead-lettered or faults)"
SESSIONS: Final = "Sessions"
REDIS: Final = "Redis"
ENDPOINTS: Final = "Metrics and logs"
GATEWAY: Final = "Gateway"
GROUPS: Final = (KAFKA, TOPICS, STATE, BATCHES, LIMITS, SESSIONS, REDIS, ENDPOINTS, GATEWAY)


@dataclass(frozen=True)
class Setting:
    """One row of the settings table: how one variable sets one field."""

    env: str
    parse: Parse
    group: str
    help: str  # one line, for ``--help``
    doc: str = ""  # the README's meaning (Markdown) when it says more than ``help``
    unit: str = ""  # shown after the default ("s")
    shown: str | None = None  # a default that is not the field's plain value (derived)
    keep_empty: bool = False  # an empty variable is parsed (as ""), not the default
    strip: bool = False  # surrounding blanks are dropped first; blank is unset


ROW: Final = "setting"


def setting(
    env: str,
    default: Any,
    parse: Parse = text,
    *,
    group: str,
    help: str,
    secret: bool = False,
    **row: Any,
) -> Any:
    """A dataclass field set by ``env`` (``read``); ``secret`` keeps it out of ``repr``."""
    return field(
        default=default,
        repr=not secret,
        metadata={ROW: Setting(env, parse, group, help, **row)},
    )


def rows(cls: type) -> Iterator[tuple[str, Setting]]:
    """(field name, row) of every field of ``cls`` set from the environment, in order."""
    for item in fields(cls):
        row = item.metadata.get(ROW)
        if row is not None:
            yield item.name, row


def read(cls: type, env: Mapping[str, str], only: Collection[str] | None = None) -> dict[str, Any]:
    """Field name -> parsed value, for each row of ``cls`` (or its fields ``only``) whose
    variable is set (unset or empty: left out, so the field keeps its default). Raises
    ConfigError."""
    values: dict[str, Any] = {}
    for name, row in rows(cls):
        if only is not None and name not in only:
            continue
        raw = env.get(row.env)
        if raw is None:
            continue
        if row.strip:
            raw = raw.strip()
        if raw or row.keep_empty:
            values[name] = row.parse(raw, row.env)
    return values
