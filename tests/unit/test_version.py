"""The version is defined once (``stream.__version__``); everything else reads it."""

from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

import stream

ROOT = Path(__file__).resolve().parents[2]


def test_the_installed_package_and_the_chart_carry_the_one_version() -> None:
    assert version("context-stream") == stream.__version__
    chart = (ROOT / "helm" / "context-stream" / "Chart.yaml").read_text()
    assert f'appVersion: "{stream.__version__}"' in chart


def test_stream_version_names_the_version_and_which_core_runs(capsys: Any) -> None:
    from stream import native
    from stream.cli import main

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"stream {stream.__version__}; {native.status()}"
