"""Read dsh session logs: files or directories, plain or zstd, header or not.

The session id comes from the header line, else from the file name without extensions.
Lines that cannot be read are reported with their line number and skipped: one torn
line (a crash mid-append) must not hide the rest of a session. This package only reads;
folding what it reads is ``session.offline``'s job.
"""

import io
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import IO, Any

from stream.contract.errors import BadLine, Unreadable
from stream.contract.jsontext import loads
from stream.contract.storage import read_lines, session_id_of

LOG_SUFFIXES = (".jsonl", ".jsonl.zstd", ".jsonl.zst")


class LogError(OSError):
    """A path that cannot be read as a session log at all."""


def is_log(path: Path) -> bool:
    return path.name.endswith(LOG_SUFFIXES)


def log_files(paths: list[str]) -> list[Path]:
    """Expand the arguments: a directory means every log in it (recursively, sorted)."""
    found: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*") if p.is_file() and is_log(p)))
        elif path.is_file():
            found.append(path)
        else:
            raise LogError(f"{name}: no such file or directory")
    return found


def default_session_id(path: Path) -> str:
    name = path.name
    for suffix in sorted(LOG_SUFFIXES, key=len, reverse=True):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name.split(".", 1)[0]


# Lines are read through a buffer of this size: a typical log in one or two reads, not a
# read per 8 KiB (the default), and still a bounded amount of memory for a huge log.
READ_BUFFER = 1 << 20


def _open(path: Path, buffering: int = -1) -> IO[bytes]:
    try:
        raw = path.open("rb", buffering=buffering)
    except OSError as error:
        raise LogError(f"{path}: {error.strerror or error}") from None
    if path.name.endswith((".zstd", ".zst")):
        return io.BufferedReader(_Zstd(raw, path))
    return raw


class _Zstd(io.RawIOBase):
    """Decompressed zstd frames, one after another, that fail loudly when the file ends
    inside a frame (zstandard's stream reader just stops: a truncated log would lose its
    tail silently)."""

    def __init__(self, raw: IO[bytes], path: Path) -> None:
        import zstandard

        self._path = path
        self._error = zstandard.ZstdError
        self._raw, self._new = raw, zstandard.ZstdDecompressor().decompressobj
        self._frame = self._new()
        self._pending = b""
        self._started = False  # inside a frame that has not ended yet

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            return self._readinto(buffer)
        except self._error as error:  # a corrupt frame: the log's error, wherever read
            raise LogError(f"{self._path}: {error}") from None

    def _readinto(self, buffer: Any) -> int:
        while not self._pending:
            chunk = self._raw.read(1 << 16)
            if not chunk:
                if self._started and not self._frame.eof:
                    raise LogError(f"{self._path}: truncated zstd frame (the log ends mid-frame)")
                return 0
            while chunk:
                self._started = True
                self._pending += self._frame.decompress(chunk)
                chunk = b""
                if self._frame.eof:
                    chunk = self._frame.unused_data
                    self._frame, self._started = self._new(), False
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size

    def close(self) -> None:
        self._raw.close()
        super().close()


@dataclass(slots=True)
class SessionLog:
    """One log file, read lazily."""

    path: Path
    session_id: str

    def lines(self) -> Iterator[tuple[int, Any]]:
        """``(line number, value)``: a raw event object, a ``ChunkRun`` for a packed row,
        or a ``BadLine`` for a line that is not JSON or not a valid storage row."""
        with _open(self.path, READ_BUFFER) as stream:
            try:
                yield from read_lines(stream)
            except Exception as error:  # zstd frame errors, I/O errors mid-file
                if isinstance(error, LogError):
                    raise
                raise LogError(f"{self.path}: {error}") from None

    def where(self, bad: BadLine) -> str:
        return where(self.path, bad)


def where(path: Path, bad: BadLine) -> str:
    """A bad line as an editor would point at it: ``path:line: unreadable: reason``."""
    return f"{path}:{bad.line}: unreadable: {bad.reason}"


def open_log(path: Path) -> SessionLog:
    """Open a log and read its session id from the header line (if it has one)."""
    with _open(path) as stream:
        try:
            first = stream.readline()
        except Exception as error:
            raise LogError(f"{path}: {error}") from None
    return SessionLog(path, _session_id(path, first))


@contextmanager
def text_lines(path: Path) -> Iterator[tuple[str, Iterator[bytes]]]:
    """A log opened once: its session id (read as ``open_log`` reads it) and its text
    lines from the first, for ``session.offline.fold_text``: ``readline`` in C, with no
    Python code per line (``SessionLog.lines`` costs a tenth of ``stream fold`` on many
    small logs). An ``OSError`` inside the block, a broken pipe aside, is taken for an
    error reading the log (a fold does no I/O) and becomes a ``LogError`` naming it."""
    with _open(path, READ_BUFFER) as stream:
        try:
            first = stream.readline()
            yield _session_id(path, first), chain((first,), stream)
        except (LogError, BrokenPipeError):
            raise
        except OSError as error:  # the file's reads; zstd frame errors are LogErrors
            raise LogError(f"{path}: {error.strerror or error}") from None


def _session_id(path: Path, first: bytes) -> str:
    """The header line's session id, else the file name's."""
    if first.strip():
        try:
            found = session_id_of(loads(first))
        except Unreadable:
            found = None
        if found is not None:
            return found
    return default_session_id(path)


def read_logs(paths: list[str]) -> Iterator[SessionLog]:
    """Every log under ``paths``, opened, in file order."""
    for path in log_files(paths):
        yield open_log(path)
