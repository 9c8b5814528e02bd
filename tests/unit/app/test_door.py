"""The one door a worker is built through (stream.app.worker.assemble, stream.app.run's
``prepare``; ``faust -A stream.app.entry`` through the same): importing builds nothing, the
constructor wires nothing, wiring is assemble's last step and happens once."""

import sys
from pathlib import Path

import faust
import pytest
from faust.cli.base import find_app

import stream.app
from stream.app import run
from stream.app.commit import to_messages
from stream.app.worker import Ledger, Worker, assemble, faust_app
from stream.config import Settings
from stream.session.batch import BatchResult, Counts, fold_batch
from tests.unit.app.memory import TOPIC, batches


def _settings(tmp_path: Path) -> Settings:
    return Settings(state_dir=str(tmp_path), input_topic="events-in")


def test_the_package_builds_nothing_on_access() -> None:
    with pytest.raises(AttributeError):
        stream.app.app  # noqa: B018 - the old door: an app built on attribute access


def test_assemble_returns_the_worker_wired_once(tmp_path: Path) -> None:
    worker = assemble(_settings(tmp_path), 2)
    assert worker.wired and list(worker.app.agents) == ["fold_sessions"]
    with pytest.raises(RuntimeError, match="wired"):
        worker.wire()  # every task and timer would run twice
    assert list(worker.app.agents) == ["fold_sessions"]


def test_the_constructor_keeps_its_parts_and_wires_nothing(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    built = assemble(settings, 2)
    app = faust_app(settings, 2)
    worker = Worker(
        settings,
        app,
        built.source,
        built.table,
        built.stats,
        built.claims,
        built.publisher,
        built.committer,
        built.expiry,
        built.ledger,
    )
    assert not worker.wired and list(app.agents) == []
    assert worker.wire() is worker and list(app.agents) == ["fold_sessions"]


def test_the_ledger_counts_each_committed_batch_and_files_it_for_expiry() -> None:
    """What the commit path's ``committed`` does, built before it (the expiry index is
    the only part it needs)."""
    filed: list[BatchResult] = []

    class Index:
        def file(self, result: BatchResult) -> None:
            filed.append(result)

    ledger = Ledger(TOPIC, Index())  # type: ignore[arg-type]
    results = [fold_batch(to_messages(b), lambda key, partition: None) for b in batches((6, 4))]
    expected = Counts()
    for result in results:
        ledger([], result)
        expected.add(result.counts)
    assert filed == results
    assert ledger.totals.as_dict() == expected.as_dict() != Counts().as_dict()


def test_faust_dash_a_finds_the_app_prepare_built_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``faust -A stream.app.entry``: Faust imports the module and takes its ``app``, the
    one ``run.prepare`` built on the settings of the environment (no broker here:
    ``prepare``'s checks stand aside, ``assemble`` is the real one)."""
    seen: list[Settings] = []

    def prepare(settings: Settings) -> Worker:
        seen.append(settings)
        return assemble(_settings(tmp_path), 2)

    monkeypatch.setenv("STREAM_INPUT_TOPIC", "from-the-environment")
    monkeypatch.setattr(run, "prepare", prepare)
    monkeypatch.delitem(sys.modules, "stream.app.entry", raising=False)
    try:
        app = find_app("stream.app.entry")
    finally:
        # Built on import: leave no built app behind.
        sys.modules.pop("stream.app.entry", None)
        vars(stream.app).pop("entry", None)
    assert isinstance(app, faust.App) and list(app.agents) == ["fold_sessions"]
    assert [s.input_topic for s in seen] == ["from-the-environment"]
