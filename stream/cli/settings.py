"""The settings table, drawn: ``stream worker --help``'s list and the README's table.

Every row comes from ``stream.config`` (``Settings``, and ``stream.kafka_security``'s
``KafkaSecurity``) and, for
the gateway's own settings, ``stream.gateway.config``: the variable, its group, its
meaning, and its default, read from the dataclass at the moment the help is drawn, so a
changed default cannot leave the help or the README behind. ``tests/unit/cli/
test_settings.py`` checks that the README's configuration table is this module's
``readme_table()``; ``python -m stream.cli.settings`` prints it.
"""

from collections.abc import Iterator, Mapping
from dataclasses import MISSING, dataclass, fields, is_dataclass
from typing import Any, Final

from stream.config import Settings
from stream.environment import GROUPS as ORDER
from stream.environment import ROW, Setting


@dataclass(frozen=True)
class Variable:
    name: str
    field: str | None  # the Settings attribute (dotted) whose default is shown
    meaning: str
    unit: str = ""
    shown: str | None = None  # a default that is not a plain value (derived, per host)
    group: str = ""
    doc: str = ""  # the README's meaning, when it says more than ``meaning``


def _variable(path: str, row: Setting) -> Variable:
    return Variable(row.env, path, row.help, row.unit, row.shown, row.group, row.doc)


def table(cls: type, prefix: str = "") -> Iterator[Variable]:
    """The rows of ``cls`` in field order; a dataclass field without a row of its own
    (``Settings.kafka``) gives its class's rows in its place."""
    for item in fields(cls):
        row = item.metadata.get(ROW)
        if row is not None:
            yield _variable(prefix + item.name, row)
        elif item.default_factory is not MISSING and is_dataclass(item.default_factory):
            yield from table(item.default_factory, f"{prefix}{item.name}.")


def _grouped(rows: Iterator[Variable]) -> tuple[tuple[str, tuple[Variable, ...]], ...]:
    listed = list(rows)
    return tuple(
        (title, group) for title in ORDER if (group := tuple(v for v in listed if v.group == title))
    )


# What the worker reads (``Settings.from_env``), by group.
GROUPS: Final = _grouped(table(Settings))


def variables() -> Iterator[Variable]:
    for _, group in GROUPS:
        yield from group


def gateway_variables() -> Iterator[Variable]:
    """The gateway's group: its part of ``Settings`` and ``GatewayConfig``'s own rows
    (imported here, not above: the worker's help need not load the gateway)."""
    from stream.gateway.config import GatewayConfig

    yield from (v for v in variables() if v.group == "Gateway")
    yield from table(GatewayConfig)


def _value(value: Any) -> str:
    if value is None or value == "" or value == ():
        return "unset"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    return str(value)


def _default(variable: Variable, defaults: Any) -> Any:
    value: Any = defaults
    for part in (variable.field or "").split("."):
        value = getattr(value, part, None)
    return value


def default_text(variable: Variable, defaults: Settings | None = None) -> str:
    """The default as the environment would spell it, read from ``Settings``."""
    if variable.shown is not None:
        return variable.shown
    if variable.field is None:
        return "unset"
    text = _value(_default(variable, defaults or Settings()))
    return f"{text} {variable.unit}" if variable.unit and text != "unset" else text


def epilog(width: int = 100) -> str:
    """The settings by group, each with its default: ``stream worker --help``'s tail."""
    defaults = Settings()
    lines = ['environment (defaults in brackets; README, "Configuration", says more):']
    for title, group in GROUPS:
        lines.append(f"  {title}:")
        for variable in group:
            head = f"    {variable.name} [{default_text(variable, defaults)}]"
            lines.append(f"{head}  {variable.meaning}" if len(head) < width // 2 else head)
            if len(head) >= width // 2:
                lines.append(f"        {variable.meaning}")
    return "\n".join(lines)


def readme_default(variable: Variable, defaults: Any) -> str:
    """The README's default cell: Markdown, a number as short as it is exact."""
    if variable.shown is not None:
        return f"`{variable.shown}`"
    value = _default(variable, defaults)
    if isinstance(value, float):
        text = f"`{value:g}`"
    elif isinstance(value, int) and not isinstance(value, bool) and value >= 1 << 20:
        mib, rest = divmod(value, 1 << 20)
        text = f"`{value}`" + ("" if rest else f" ({mib} MiB)")
    else:
        shown = _value(value)
        text = "" if shown == "unset" else f"`{shown}`"
    return f"{text} {variable.unit}" if text and variable.unit else text


def readme_table() -> str:
    """The README's configuration table (Markdown), by group."""
    defaults = Settings()
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for title, group in GROUPS:
        lines.append(f"| **{title}** | | |")
        for v in group:
            default = readme_default(v, defaults)
            cell = f" {default} " if default else " "
            lines.append(f"| `{v.name}` |{cell}| {v.doc or v.meaning} |")
    return "\n".join(lines)


class Recorder(Mapping[str, str]):
    """An empty environment that remembers every name looked up in it."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def __getitem__(self, name: str) -> str:
        self.names.append(name)
        raise KeyError(name)

    def get(self, name: str, default: Any = None) -> Any:
        self.names.append(name)
        return default

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def read_by_worker() -> list[str]:
    """The variables ``Settings.from_env`` reads, in the order it reads them."""
    recorder = Recorder()
    Settings.from_env(recorder)
    return list(dict.fromkeys(recorder.names))


if __name__ == "__main__":
    print(readme_table())
