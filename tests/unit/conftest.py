"""Fixtures for the pure fold-core unit tests.

The event builders live in ``builders.py`` (importable from the test modules); the
fixtures here expose them and fresh projection states / session records.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from stream.session.processor import SessionRecord

from . import builders


@pytest.fixture
def ev() -> Callable[..., Any]:
    """``ev(type, seq, data=..., surfaceOp=...)`` → ``read_event(...)``."""
    return builders.ev


@pytest.fixture
def record() -> SessionRecord:
    """A fresh session record (every projection at init, cursor -1)."""
    return SessionRecord.new()
