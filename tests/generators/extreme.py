"""Messages a hostile producer writes: arbitrary bytes, extreme but well-formed events, odd
keys and arbitrary headers (reset records among them).

One generator for two suites: the property test of ``fold_batch`` (tests/unit) draws its
``random.Random`` from Hypothesis, and the fault suite (tests/integration) sends the same
messages through a real broker and worker. Every message is ``(key, value, headers)``.
"""

from __future__ import annotations

import random
from typing import Any, Final

import orjson

from stream.output.headers import RESET_HEADER
from stream.testing import events as build

MAX_SAFE: Final = 2**53 - 1
Raw = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]

# Integers at every edge the contract and the encoders have: the largest safe integer
# and one past it, the edges of int64 and uint64 (orjson refuses 2^64 and more).
EXTREME_INTEGERS: Final = (
    0,
    1,
    MAX_SAFE - 1,
    MAX_SAFE,
    MAX_SAFE + 1,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    -(2**63),
    -(2**63) - 1,
    10**30,
)
GENERATIONS: Final = (
    b"1",
    b"2",
    b"7",
    str(MAX_SAFE).encode(),
    str(MAX_SAFE + 1).encode(),
    str(2**63).encode(),
    str(2**64).encode(),
    b"0",
    b"-1",
    b"1_0",
    b" 3",
    b"3\n",
    b"0x10",
    b"\xff",
    b"",
    None,
)
ODD_KEYS: Final = (
    None,
    b"",
    b"\xff",
    b"\xff\xfe",
    b"x[/]",
    b"[bold red]x[/]",
    b"\x1b[31mred\x1b[0m",
    b"\x00",
    b"line\nbreak",
    "ü😀\u2028".encode(),
    b"k" * 1_100,
)


def _text(value: Any) -> bytes:
    return orjson.dumps(value)


def _usage_sample(rng: random.Random, seq: int, big: int) -> dict[str, Any]:
    sample = build.usage(big, rng.choice((0, big)), cache_read=rng.choice((0, big)))
    return build.usage_chunk(seq, sample, turn=0, step=seq, time=seq)


def _big_literal(seq: int, number: int) -> bytes:
    """A well-formed event whose token counts are integers orjson may not write."""
    return (
        b'{"type":"assistant/chunk","seq":%d,"time":%d,"data":{"turn":0,"step":%d,'
        b'"chunk":{"type":"usage","usage":{"inputTokens":%d,"outputTokens":%d}}}}'
        % (seq, seq, seq, number, number)
    )


def _extreme_session(rng: random.Random, key: bytes) -> list[Raw]:
    """A session of well-formed events whose numbers sit at and past every bound."""
    out: list[Raw] = []
    seq = 0
    events: list[bytes] = [_text(build.user_message(0, build.texts("hi"), time=0))]
    seq = 1
    for _ in range(rng.randint(1, 6)):
        roll = rng.random()
        if roll < 0.35:
            events.append(_text(_usage_sample(rng, seq, MAX_SAFE)))
        elif roll < 0.55:
            events.append(_big_literal(seq, rng.choice(EXTREME_INTEGERS)))
        elif roll < 0.7:
            window = rng.choice((1, MAX_SAFE, MAX_SAFE + 1, 2**64))
            events.append(
                b'{"type":"request/context","seq":%d,"time":%d,"data":{"contextWindow":%d}}'
                % (seq, seq, window)
            )
        elif roll < 0.85:
            # A metered replacement priced at the bound: the surface moves by -2^53 + 1.
            events.append(_text(build.metering(seq, 0, 0, MAX_SAFE, time=seq)))
            seq += 1
            op = build.replace(0, 0)
            events.append(_text(build.user_message(seq, build.texts("y"), op=op, time=seq)))
        else:
            events.append(_text(build.user_message(seq, build.texts("x" * 50), time=seq)))
        seq += 1
    # Sent as one segment, one event a message, or a long segment of usage samples.
    shape = rng.random()
    if shape < 0.4:
        out.append((key, b"[" + b",".join(events) + b"]", []))
    elif shape < 0.8:
        out.extend((key, event, []) for event in events)
    else:
        run = [_text(_usage_sample(rng, seq + i, MAX_SAFE)) for i in range(rng.randint(2, 300))]
        out.append((key, b"[" + b",".join([*events, *run]) + b"]", []))
    return out


def _headers(rng: random.Random) -> list[tuple[str, bytes | None]]:
    names = ("", "gen", "tally", "x-trace", "ünï", "\x00", "reason", RESET_HEADER.upper())
    return [
        (rng.choice(names), rng.choice((None, b"", rng.randbytes(rng.randint(0, 12)))))
        for _ in range(rng.randint(0, 4))
    ]


def extreme_messages(rng: random.Random, count: int, prefix: str = "x") -> list[Raw]:
    """About ``count`` hostile messages for sessions named ``{prefix}-...``."""
    out: list[Raw] = []
    sessions = 0
    while len(out) < count:
        roll = rng.random()
        key = f"{prefix}-{sessions}".encode()
        if roll < 0.3:
            sessions += 1
            out.extend(_extreme_session(rng, key))
        elif roll < 0.45:  # a reset record, well-formed or not
            target = rng.choice((key, *ODD_KEYS))
            value = rng.choice((None, b"", b"{}"))
            out.append((target, value, [(RESET_HEADER, rng.choice(GENERATIONS))]))
        elif roll < 0.6:  # arbitrary bytes
            value = rng.choice((None, rng.randbytes(rng.randint(0, 80))))
            out.append((rng.choice((key, *ODD_KEYS)), value, _headers(rng)))
        elif roll < 0.75:  # good events under odd keys or with arbitrary headers
            event = _text(build.user_message(0, build.texts("odd"), time=0))
            out.append((rng.choice((key, *ODD_KEYS)), event, _headers(rng)))
        elif roll < 0.9:  # numbers JSON may hold but no encoder here writes back
            number = rng.choice(EXTREME_INTEGERS)
            value = rng.choice(
                (
                    b'{"type":"user/message","seq":%d,"time":0,"data":{}}' % number,
                    b'{"type":"x/y","seq":0,"time":%d,"data":{"n":%d}}' % (number, number),
                    b"[%d]" % number,
                    b"%d" % number,
                    b'{"type":"x/y","seq":0,"time":0,"data":{"n":1e400}}',
                )
            )
            out.append((key, value, []))
        else:  # segments of structure at the edges: empty, deep, wrong types
            value = rng.choice((b"[]", b"[[]]", b"[{}]", b"[null]", b"[" * 40 + b"]" * 40))
            out.append((key, value, _headers(rng)))
    return out
