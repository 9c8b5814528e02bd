"""``stream serve``'s start-up line: the gateway's URL, Redis without its password."""

import pytest

from stream.cli.serve import listening_line
from stream.config import Settings


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://svc:s3cret@redis:6379/0", "redis://svc:***@redis:6379/0"),
        ("rediss://:s3cret@redis:6380/1", "rediss://:***@redis:6380/1"),
        ("redis://svc:p@ss-s3cret@redis:6379/0", "redis://svc:***@redis:6379/0"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ],
)
def test_the_listening_line_never_shows_the_redis_password(url: str, shown: str) -> None:
    line = listening_line(Settings.from_env({"REDIS_URL": url}), "127.0.0.1", 8080)
    assert "s3cret" not in line
    # `make demo` reads the URL from the line's start.
    assert line == f"stream serve: http://127.0.0.1:8080/ (Redis {shown}, prefix 'ctx:')"


def test_an_ipv6_address_is_bracketed() -> None:
    line = listening_line(Settings(), "::1", 0)
    assert line.startswith("stream serve: http://[::1]:0/ ")
