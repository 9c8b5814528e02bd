"""``stream worker --help``'s table against what the worker reads and the README lists."""

import re
from dataclasses import replace

from stream.cli.settings import default_text, epilog, read_by_worker, variables
from stream.config import Settings
from tests.integration.harness import REPO


def test_every_variable_the_worker_reads_is_listed_once() -> None:
    listed = [v.name for v in variables()]
    assert len(listed) == len(set(listed))
    missing = set(read_by_worker()) - set(listed)
    assert not missing, f"add to stream/cli/settings.py: {sorted(missing)}"
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
