"""``stream worker --help``'s table against what the worker reads and the README lists."""

import re
from dataclasses import replace

from stream.cli.settings import (
    GROUPS,
    default_text,
    epilog,
    gateway_variables,
    read_by_worker,
    readme_table,
    table,
    variables,
)
from stream.config import Settings
from stream.environment import GROUPS as ORDER
from stream.gateway.config import GatewayConfig
from tests.integration.harness import REPO


def test_every_variable_the_worker_reads_is_listed_once() -> None:
    listed = [v.name for v in variables()]
    assert len(listed) == len(set(listed))
    missing = set(read_by_worker()) - set(listed)
    assert not missing, f"declare a row (setting) in stream/config.py: {sorted(missing)}"
    assert {"KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL"} <= set(read_by_worker())


def test_every_listed_default_comes_from_a_settings_field() -> None:
    defaults = Settings()
    for variable in variables():
        if variable.field is None:
            continue
        value = defaults
        for part in variable.field.split("."):
            assert hasattr(value, part), f"{variable.name}: no Settings.{variable.field}"
            value = getattr(value, part)


def test_a_changed_default_shows_in_the_help() -> None:
    batch = next(v for v in variables() if v.name == "STREAM_BATCH_MAX")
    assert default_text(batch, replace(Settings(), batch_max=123)) == "123"
    resets = next(v for v in variables() if v.name == "STREAM_RESETS")
    assert default_text(resets, replace(Settings(), resets=False)) == "0"
    assert "STREAM_DLQ_TOPIC [{STREAM_INPUT_TOPIC}.dlq]" in epilog()


def test_the_readme_configuration_table_names_the_same_variables() -> None:
    readme = (REPO / "README.md").read_text()
    table = readme.split("### Configuration (environment)", 1)[1].split("\n\n", 2)[1]
    named = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", table))
    listed = {v.name for v in variables()}
    assert listed - named == set(), "README's configuration table lacks these"


def test_the_readme_configuration_table_is_drawn_from_the_settings_table() -> None:
    readme = (REPO / "README.md").read_text()
    table = readme.split("### Configuration (environment)", 1)[1].split("\n\n", 2)[1]
    assert table == readme_table(), "run `python -m stream.cli.settings` into README.md"


def test_the_help_and_the_readme_list_the_groups_in_one_order() -> None:
    titles = [title for title, _ in GROUPS]
    assert titles == [t for t in ORDER if t in titles]
    assert [f"  {t}:" for t in titles] == [
        line for line in epilog().splitlines() if line.startswith("  ") and line.endswith(":")
    ]
    assert [f"| **{t}** | | |" for t in titles] == [
        line for line in readme_table().splitlines() if line.startswith("| **")
    ]


def test_every_variable_of_the_table_is_named_once() -> None:
    names = [v.name for v in (*variables(), *table(GatewayConfig))]
    assert len(names) == len(set(names))
    assert {v.name for v in gateway_variables()} == {
        n for n in names if n.startswith("STREAM_GATEWAY_")
    }


def test_docs_gateway_lists_every_gateway_variable() -> None:
    text = (REPO / "docs" / "gateway.md").read_text()
    section = text.split("\n## Configuration\n", 1)[1]
    named = set(re.findall(r"`(STREAM_GATEWAY_[A-Z0-9_]+)`", section))
    listed = {v.name for v in gateway_variables()}
    assert len(listed) == 23
    assert listed - named == set()


def test_the_gateway_rows_give_the_gateway_config_defaults() -> None:
    defaults = GatewayConfig()
    for variable in table(GatewayConfig):
        assert variable.group == "Gateway"
        assert variable.field is not None and hasattr(defaults, variable.field)
