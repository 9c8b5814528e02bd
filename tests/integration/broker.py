"""A single KRaft broker a fault scenario stops and starts (``Broker``), on a fixed port
below the ephemeral range so that clients reconnecting while it is down cannot take it."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tests.integration.faults import Outage, cpu_seconds, log_lines
from tests.integration.harness import REPO, Worker, port_is_free

# Below 32768: never handed out as an ephemeral port, so the clients reconnecting in a
# loop while the broker is down cannot take it from under it.
FIXED_PORTS: Final = (21092, 21192, 21292, 21392, 21492, 21592)


@dataclass
class Broker:
    """A dedicated single-node broker (deploy/kafka.sh) on a fixed port, to stop and
    start again with the same data directory."""

    data_dir: Path
    port: int = 0
    controller_port: int = 0
    options: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    bounces: list[float] = field(default_factory=list)  # seconds down, per bounce

    @classmethod
    def on_fixed_port(cls, data_dir: Path, **kwargs: Any) -> Broker:
        for port in FIXED_PORTS:
            if port_is_free(port) and port_is_free(port + 1):
                return cls(data_dir, port, port + 1, **kwargs)
        raise RuntimeError(f"none of the fixed broker ports {FIXED_PORTS} is free")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self, *args: str, timeout: float) -> str:
        done = subprocess.run(
            ["bash", str(REPO / "deploy" / "kafka.sh"), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=os.environ | self.env,
            check=False,
        )
        if done.returncode:
            raise RuntimeError(f"kafka.sh {args[0]} failed:\n{done.stderr[-3000:]}")
        return done.stdout.strip()

    def start(self) -> str:
        return self._run(
            "start",
            "--port",
            str(self.port),
            "--controller-port",
            str(self.controller_port),
            "--data-dir",
            str(self.data_dir),
            "--timeout",
            "180",
            *self.options,
            timeout=300,
        )

    def stop(self) -> None:
        self._run("stop", "--data-dir", str(self.data_dir), timeout=120)

    def bounce(self, down: float, watch: Worker | None = None) -> Outage | None:
        """Stop, stay down ``down`` seconds, start again (same port, same data); with
        ``watch``, what that worker did meanwhile."""
        stopped = time.monotonic()
        before = (cpu_seconds(watch), log_lines(watch)) if watch is not None else (0.0, 0)
        self.stop()
        time.sleep(down)
        seen = (cpu_seconds(watch), log_lines(watch)) if watch is not None else (0.0, 0)
        elapsed = time.monotonic() - stopped
        self.start()
        self.bounces.append(time.monotonic() - stopped)
        if watch is None:
            return None
        return Outage(elapsed, seen[0] - before[0], seen[1] - before[1])
