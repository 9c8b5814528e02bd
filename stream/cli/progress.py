"""Terminal progress for long commands: a rich bar on a terminal, nothing otherwise.

    with progress("producing", unit="events") as bar:  # total optional
        for batch in work:
            ...
            bar.advance(len(batch))

The bar goes to stderr and only when stderr is a terminal, so pipes, CI logs and tests
never see control codes; a command prints its own final report line either way. A
``Tracker`` is a plain object with ``advance``/``update``, so library code can take
``bar.advance`` as a callback without importing rich. ``Rate`` and ``duration`` serve
commands that print plain progress lines when not on a terminal (``stream lag --watch``).
"""

import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol

from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class Tracker(Protocol):
    def advance(self, amount: int = 1) -> None: ...

    def update(
        self, *, completed: int | None = None, total: int | None = None, status: str | None = None
    ) -> None: ...


class _Silent:
    """The tracker off a terminal: counts nothing, prints nothing."""

    def advance(self, amount: int = 1) -> None:
        pass

    def update(
        self, *, completed: int | None = None, total: int | None = None, status: str | None = None
    ) -> None:
        pass


class _Bar:
    def __init__(self, progress: Progress, task: TaskID) -> None:
        self._progress, self._task = progress, task

    def advance(self, amount: int = 1) -> None:
        self._progress.advance(self._task, amount)

    def update(
        self, *, completed: int | None = None, total: int | None = None, status: str | None = None
    ) -> None:
        if status is None:
            self._progress.update(self._task, completed=completed, total=total)
        else:
            self._progress.update(self._task, completed=completed, total=total, status=status)


class _Count(ProgressColumn):
    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        done = int(task.completed)
        if task.total is None:
            return Text(f"{done:,} {self.unit}")
        return Text(f"{done:,}/{int(task.total):,} {self.unit}")


class _Speed(ProgressColumn):
    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:,.0f} {self.unit}/s")


class _Board(Progress):
    """A progress bar with a live renderable above it (a table, say)."""

    def __init__(
        self, *columns: ProgressColumn, above: Callable[[], RenderableType] | None, **options: bool
    ) -> None:
        self._above = above  # before Progress starts: it may render right away
        super().__init__(*columns, **options)  # type: ignore[arg-type]

    def get_renderables(self) -> Iterable[RenderableType]:
        if self._above is not None:
            yield self._above()
        yield from super().get_renderables()


def interactive(console: Console | None = None) -> bool:
    return (console or Console(stderr=True)).is_terminal


@contextmanager
def progress(
    description: str,
    *,
    total: int | None = None,
    unit: str = "events",
    above: Callable[[], RenderableType] | None = None,
    console: Console | None = None,
    transient: bool = False,
) -> Iterator[Tracker]:
    """A progress bar on stderr (count, rate, ETA once ``total`` is known), if a terminal.

    ``above`` is redrawn over the bar on every refresh (a live table); ``transient``
    removes the display when done. Off a terminal the tracker is silent.
    """
    console = console or Console(stderr=True)
    if not console.is_terminal:
        yield _Silent()
        return
    board = _Board(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        _Count(unit),
        _Speed(unit),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[status]}"),
        above=above,
        console=console,  # type: ignore[arg-type]
        transient=transient,
    )
    with board:
        yield _Bar(board, board.add_task(description, total=total, status=""))


class Rate:
    """Per-second growth of a count over a sliding window of (time, count) samples."""

    def __init__(self, window: float = 10.0) -> None:
        self.window = window
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, at: float, count: int) -> None:
        samples = self._samples
        samples.append((at, count))
        # Keep one sample at or before the window's start as the anchor of the difference.
        while len(samples) > 2 and samples[1][0] <= at - self.window:
            samples.popleft()

    @property
    def per_second(self) -> float | None:
        if len(self._samples) < 2:
            return None
        (t0, c0), (t1, c1) = self._samples[0], self._samples[-1]
        return (c1 - c0) / (t1 - t0) if t1 > t0 else None


def eta(remaining: int, per_second: float | None) -> float | None:
    """Seconds until ``remaining`` is worked off at ``per_second`` (None: not draining)."""
    if remaining <= 0:
        return 0.0
    if per_second is None or per_second <= 0:
        return None
    return remaining / per_second


def duration(seconds: float | None) -> str:
    """``0:42``, ``1:02:03``; ``-`` when unknown."""
    if seconds is None or math.isinf(seconds) or math.isnan(seconds):
        return "-"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def stdout_console() -> Console:
    """Tables on stdout: the terminal's width, or 120 columns into a pipe (rich would
    otherwise wrap at 80 and split the numbers)."""
    console = Console()
    return console if console.is_terminal else Console(width=120, no_color=True)
