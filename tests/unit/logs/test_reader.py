"""Reading dsh logs from disk (``stream.logs.reader``; contract: "Session logs")."""

from pathlib import Path
from typing import Any

import orjson
import pytest
import zstandard

from stream.contract.errors import BadLine
from stream.contract.storage import ChunkRun, read_lines
from stream.logs.reader import (
    LogError,
    SessionLog,
    default_session_id,
    is_log,
    log_files,
    open_log,
    read_logs,
    text_lines,
)
from stream.testing import events as build


def line(value: Any) -> bytes:
    return orjson.dumps(value) + b"\n"


def user(seq: int) -> dict[str, Any]:
    return build.user_message(seq, build.texts("abcd"))


def write(path: Path, *lines: bytes, compress: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = b"".join(lines)
    path.write_bytes(zstandard.ZstdCompressor().compress(raw) if compress else raw)
    return path


def read(path: Path) -> tuple[str, list[tuple[int, Any]]]:
    log = open_log(path)
    read = log.session_id, list(log.lines())
    with text_lines(path) as (session_id, lines):  # `stream fold`'s one open: the same
        assert (session_id, list(read_lines(lines))) == read
    return read


# --- session ids --------------------------------------------------------------------------------


def test_the_header_line_names_the_session_and_is_not_an_event(tmp_path: Path) -> None:
    path = write(
        tmp_path / "file-name.jsonl", line(build.session_header("from-header")), line(user(0))
    )
    session_id, lines = read(path)
    assert session_id == "from-header"
    assert lines == [(2, user(0))]


def test_without_a_header_the_file_name_is_the_session_id(tmp_path: Path) -> None:
    path = write(tmp_path / "s-7.jsonl", line(user(0)), line(user(1)))
    session_id, lines = read(path)
    assert session_id == "s-7"
    assert [number for number, _ in lines] == [1, 2]


@pytest.mark.parametrize(
    ("name", "session_id"),
    [
        ("a.jsonl", "a"),
        ("a.jsonl.zstd", "a"),
        ("a.jsonl.zst", "a"),
        ("v1.2.jsonl", "v1.2"),  # only the log suffix goes
        ("a.json", "a"),  # not a log name: everything after the first dot goes
    ],
)
def test_default_session_ids(name: str, session_id: str) -> None:
    assert default_session_id(Path("/x") / name) == session_id


def test_only_the_first_line_can_be_the_header(tmp_path: Path) -> None:
    header = build.session_header("late")
    path = write(tmp_path / "s.jsonl", line(user(0)), line(header))
    session_id, lines = read(path)
    assert session_id == "s"
    assert lines == [(1, user(0)), (2, header)]  # the fold reports line 2 (no seq)


@pytest.mark.parametrize(
    "first",
    [
        b'{"type":"session","id":7}\n',  # an id that is not a string
        b'{"type":"session"}\n',
        b"{torn\n",
    ],
)
def test_a_first_line_that_is_no_header_falls_back_to_the_file_name(
    tmp_path: Path, first: bytes
) -> None:
    session_id, lines = read(write(tmp_path / "s.jsonl", first, line(user(0))))
    assert session_id == "s"
    assert lines[0][0] == 1 and lines[1] == (2, user(0))  # the first line is still read


def test_a_blank_first_line_is_no_header(tmp_path: Path) -> None:
    path = write(tmp_path / "s.jsonl", b"\n", line(build.session_header("h")), line(user(0)))
    session_id, lines = read(path)
    assert session_id == "s"
    assert lines == [(2, build.session_header("h")), (3, user(0))]


# --- lines --------------------------------------------------------------------------------------


def test_torn_lines_are_reported_with_their_real_line_numbers(tmp_path: Path) -> None:
    bad_row = build.chunk_row("text-chunks", 1, 0, ["a", "b"], dt=[])  # dt too short
    path = write(
        tmp_path / "s.jsonl",
        line(build.session_header("s")),
        line(user(0)),
        b"\n",
        b"   \n",
        b'{"type":"user/message","seq":1,"ti\n',  # a crash mid-append
        line(bad_row),
        line(user(1)),
        b"[1, 2\n",
    )
    log = open_log(path)
    lines = list(log.lines())
    assert [number for number, _ in lines] == [2, 5, 6, 7, 8]  # blank lines 3 and 4 skipped
    bad = {number: value for number, value in lines if isinstance(value, BadLine)}
    assert sorted(bad) == [5, 6, 8]
    assert bad[5] == BadLine(5, bad[5].reason) and bad[5].reason.startswith("not JSON")
    assert bad[6].reason.startswith("malformed text-chunks storage row: dt length 0")
    assert log.where(bad[5]) == f"{path}:5: unreadable: {bad[5].reason}"
    assert lines[3] == (7, user(1))  # the rest of the session is still there


def test_a_last_line_without_a_newline_is_read(tmp_path: Path) -> None:
    path = write(tmp_path / "s.jsonl", line(user(0)), orjson.dumps(user(1)))
    assert read(path)[1] == [(1, user(0)), (2, user(1))]


def test_lines_split_on_newline_only(tmp_path: Path) -> None:
    # U+2028, U+0085 and a lone CR inside a string are not line breaks in a JSONL log.
    odd = build.user_message(0, build.texts("a\u2028b\u0085c\rd"))
    path = write(tmp_path / "s.jsonl", line(odd), line(user(1)).replace(b"\n", b"\r\n"))
    assert read(path)[1] == [(1, odd), (2, user(1))]


def test_packed_chunk_rows_are_read_as_runs(tmp_path: Path) -> None:
    row = build.chunk_row("reasoning-chunks", 1, 5, ["a", "b", "c"], dt=[1, 1])
    path = write(tmp_path / "s.jsonl", line(user(0)), line(row), line(user(4)))
    lines = read(path)[1]
    assert lines[1] == (2, ChunkRun(1, 3, row))
    assert lines[1][1].events() == [
        build.assistant_chunk(1, build.reasoning_delta("a"), time=5),
        build.assistant_chunk(2, build.reasoning_delta("b"), time=6),
        build.assistant_chunk(3, build.reasoning_delta("c"), time=7),
    ]


@pytest.mark.parametrize("suffix", [".jsonl.zstd", ".jsonl.zst"])
def test_zstd_logs_read_like_plain_ones(tmp_path: Path, suffix: str) -> None:
    lines = (line(build.session_header("z")), line(user(0)), b"{torn\n", line(user(1)))
    plain = read(write(tmp_path / "plain.jsonl", *lines))
    packed = read(write(tmp_path / f"s{suffix}", *lines, compress=True))
    assert packed == plain
    assert packed[0] == "z"
    assert default_session_id(tmp_path / f"s{suffix}") == "s"


def test_a_corrupt_zstd_file_is_a_log_error(tmp_path: Path) -> None:
    path = write(tmp_path / "s.jsonl.zstd", b"this is not a zstd frame at all\n")
    with pytest.raises(LogError, match=r"s\.jsonl\.zstd"):
        open_log(path)
    with pytest.raises(LogError, match=r"s\.jsonl\.zstd"):
        list(SessionLog(path, "s").lines())


def test_a_truncated_zstd_file_fails_loudly_mid_read(tmp_path: Path) -> None:
    body = b"".join(line(user(seq)) for seq in range(2000))
    frame = zstandard.ZstdCompressor().compress(body)
    path = tmp_path / "s.jsonl.zstd"
    path.write_bytes(frame[: len(frame) // 2])
    with pytest.raises(LogError, match=r"s\.jsonl\.zstd"):
        list(open_log(path).lines())
    with pytest.raises(LogError, match=r"s\.jsonl\.zstd"), text_lines(path) as (_, lines):
        list(lines)


def test_a_corrupt_zstd_file_is_a_log_error_read_once(tmp_path: Path) -> None:
    path = write(tmp_path / "s.jsonl.zstd", b"this is not a zstd frame at all\n")
    with pytest.raises(LogError, match=r"s\.jsonl\.zstd"), text_lines(path):
        pass


def test_reading_errors_in_a_log_opened_once_name_it_and_a_broken_pipe_stays_one(
    tmp_path: Path,
) -> None:
    path = write(tmp_path / "s.jsonl", line(user(0)))
    with pytest.raises(LogError, match=r"s\.jsonl: Input/output error"), text_lines(path):
        raise OSError(5, "Input/output error")
    with pytest.raises(BrokenPipeError), text_lines(path):  # `stream fold ... | head`
        raise BrokenPipeError
    with pytest.raises(ValueError, match="not a read"), text_lines(path):
        raise ValueError("not a read")


# --- files and directories ----------------------------------------------------------------------


def test_is_log() -> None:
    assert all(is_log(Path(n)) for n in ("a.jsonl", "a.jsonl.zstd", "a.jsonl.zst"))
    assert not any(is_log(Path(n)) for n in ("a.json", "a.jsonl.gz", "a.txt", "jsonl"))


def test_a_directory_means_every_log_under_it_recursively_in_sorted_order(
    tmp_path: Path,
) -> None:
    for name in ("b.jsonl", "a.jsonl.zst", "sub/c.jsonl", "sub/deeper/a.jsonl.zstd"):
        write(tmp_path / "logs" / name, line(user(0)))
    for name in ("notes.txt", "a.json", "sub/readme.md"):
        write(tmp_path / "logs" / name, b"x\n")
    (tmp_path / "logs" / "empty.jsonl").mkdir()  # a directory with a log's name
    found = log_files([str(tmp_path / "logs")])
    relative = [str(p.relative_to(tmp_path / "logs")) for p in found]
    assert relative == ["a.jsonl.zst", "b.jsonl", "sub/c.jsonl", "sub/deeper/a.jsonl.zstd"]


def test_arguments_keep_their_order_and_a_named_file_is_read_whatever_its_name(
    tmp_path: Path,
) -> None:
    named = write(tmp_path / "odd-name.txt", line(user(0)))
    write(tmp_path / "dir" / "x.jsonl", line(user(0)))
    found = log_files([str(tmp_path / "dir"), str(named)])
    assert found == [tmp_path / "dir" / "x.jsonl", named]


def test_read_logs_opens_each_in_order(tmp_path: Path) -> None:
    write(tmp_path / "a.jsonl", line(build.session_header("same")), line(user(0)))
    write(tmp_path / "b.jsonl", line(build.session_header("same")), line(user(1)))
    logs = list(read_logs([str(tmp_path)]))
    assert [(log.path.name, log.session_id) for log in logs] == [
        ("a.jsonl", "same"),
        ("b.jsonl", "same"),
    ]


def test_a_missing_path_is_a_log_error(tmp_path: Path) -> None:
    with pytest.raises(LogError, match=r"nope\.jsonl: no such file or directory"):
        log_files([str(tmp_path / "nope.jsonl")])
    with pytest.raises(LogError, match=r"nope\.jsonl"):
        open_log(tmp_path / "nope.jsonl")


def test_an_unopenable_path_is_a_log_error(tmp_path: Path) -> None:
    directory = tmp_path / "d.jsonl"
    directory.mkdir()
    with pytest.raises(LogError, match=r"d\.jsonl"):
        open_log(directory)
    with pytest.raises(LogError, match=r"d\.jsonl"):
        list(SessionLog(directory, "d").lines())
    with pytest.raises(LogError, match=r"d\.jsonl"), text_lines(directory):
        pass


def test_log_error_is_an_os_error() -> None:
    assert issubclass(LogError, OSError)
