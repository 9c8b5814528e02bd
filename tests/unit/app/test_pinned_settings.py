"""Faust's own environment variables cannot flip the settings the service depends on."""

from pathlib import Path

import pytest

from stream.app.worker import assemble
from stream.config import Settings
from stream.redis_client import redacted_url


def test_faust_environment_variables_are_ignored(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name, value in {
        "PROCESSING_GUARANTEE": "exactly_once",
        "WEB_BIND": "0.0.0.0",
        "STREAM_WAIT_EMPTY": "false",
        "PRODUCER_ACKS": "0",
        "BROKER_MAX_POLL_INTERVAL": "1",
        "TABLE_STANDBY_REPLICAS": "7",
    }.items():
        monkeypatch.setenv(name, value)
    settings = Settings(state_dir=str(tmp_path), standby_replicas=1, max_poll_interval=120.0)
    conf = assemble(settings, 2).app.conf
    assert conf.processing_guarantee.value == "at_least_once"
    assert conf.web_bind == "127.0.0.1"
    assert conf.stream_wait_empty is True
    assert conf.producer_acks == -1
    assert conf.broker_max_poll_interval == 120.0
    assert conf.table_standby_replicas == 1


def test_secrets_stay_out_of_reprs() -> None:
    settings = Settings.from_env(
        {
            "REDIS_URL": "redis://user:s3cret@redis:6379/0",
            "REDIS_PASSWORD": "hunter2",
            "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "KAFKA_SASL_USERNAME": "svc",
            "KAFKA_SASL_PASSWORD": "pa55",
        }
    )
    text = repr(settings)
    assert "s3cret" not in text and "hunter2" not in text and "pa55" not in text
    assert redacted_url(settings.redis_url) == "redis://user:***@redis:6379/0"
