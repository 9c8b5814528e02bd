"""The collector's thresholds and the switch interval (stream.runtime)."""

import gc
import sys

from stream.config import Settings
from stream.runtime import YOUNG, tune_gc, tune_switch, worker_young


def test_the_worker_collects_young_objects_past_what_its_batches_hold() -> None:
    assert worker_young(Settings().batch_max) == 20 * Settings().batch_max
    assert worker_young(10) == YOUNG  # never below the offline threshold
    before = gc.get_threshold()
    try:
        tune_gc(young=worker_young(25_000))
        assert gc.get_threshold() == (500_000, 20, 20)
    finally:
        gc.set_threshold(*before)


def test_the_worker_hands_the_interpreter_over_within_its_switch_interval() -> None:
    before = sys.getswitchinterval()
    try:
        tune_switch(Settings().switch_interval)
        assert sys.getswitchinterval() == Settings().switch_interval
    finally:
        sys.setswitchinterval(before)


def test_json_logging_names_an_importable_formatter_at_the_level_asked() -> None:
    import importlib

    from stream.runtime import json_logging

    config = json_logging("WARNING")
    assert config["root"] == {"level": "WARNING", "handlers": ["default"]}
    module, _, name = config["formatters"]["json"]["()"].rpartition(".")
    assert hasattr(importlib.import_module(module), name)
