"""The version is defined once (``stream.__version__``); everything else reads it."""

from importlib.metadata import version
from pathlib import Path

import stream

ROOT = Path(__file__).resolve().parents[2]


def test_the_installed_package_and_the_chart_carry_the_one_version() -> None:
    assert version("context-stream") == stream.__version__
    chart = (ROOT / "helm" / "context-stream" / "Chart.yaml").read_text()
    assert f'appVersion: "{stream.__version__}"' in chart
