"""Fixtures for the oracle suites: the pinned Node reference, installed on demand."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ORACLE_DIR = Path(__file__).resolve().parent
REPO_ROOT = ORACLE_DIR.parents[1]
REFERENCE_PACKAGE = (
    ORACLE_DIR / "node_modules" / "@deepseek-ai" / "dsh-token-meter" / "package.json"
)

# `tests.generators` is imported by path from the repository root, installed or not.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "oracle: differential test against the Node reference (tests/oracle)"
    )


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="session")
def node() -> str:
    """Path of `node`, with the pinned reference packages installed next to fold.mjs.

    Without node the oracle cannot run: skip locally, but fail in CI, where a skip
    would silently drop the only check against the reference.
    """
    node_path = shutil.which("node")
    if node_path is None:
        if _in_ci():
            pytest.fail("node is required for the oracle tests in CI", pytrace=False)
        pytest.skip("node is not installed")
    if not REFERENCE_PACKAGE.is_file():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail(
                "node is installed but npm is not: cannot install tests/oracle", pytrace=False
            )
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=ORACLE_DIR, check=True
        )
    return node_path
