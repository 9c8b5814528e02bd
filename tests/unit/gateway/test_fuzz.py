"""The verifier against whatever a client can send: it returns a grant or raises
``InvalidToken``, nothing else (anything else would be a 500 with a traceback).

Tokens are signed with the gateway's real key whatever their header says, so malformed
headers and claims get past the signature to every check behind it; values are every JSON
type (null, booleans, huge integers, NaN and infinities, strings, lists, objects)."""

import asyncio
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from stream.gateway.auth import (
    ALGORITHMS,
    FileKeys,
    Grant,
    InvalidToken,
    Verifier,
    grant_of,
)
from stream.gateway.config import GatewayConfig
from tests.unit.gateway.tokens import Signer, jwks

SIGNER = Signer("ES256", kid="k1")
NOW = int(time.time())

EXTREMES = [2**53 + 1, 2**63, 2**64, 10**309, -(10**309), 1e308, -0.0]  # int64, float edges
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.sampled_from(EXTREMES)
    | st.floats()  # NaN and the infinities included
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
# Times near now, so some tokens are valid and the lifetime and expiry checks are reached.
times = (
    st.integers(min_value=NOW - 200_000, max_value=NOW + 200_000)
    | st.sampled_from(EXTREMES)
    | json_values
)
strings = st.sampled_from(["", "*", "user-1", "user-1*", "a*b", "%2F..", "*" * 3]) | st.text()


GOOD_HEADER = {"alg": "ES256", "kid": "k1"}
GOOD_CLAIMS = {"sub": "alice", "iat": NOW, "exp": NOW + 600, "sessions": ["user-1*"]}


def _varied(
    good: dict[str, Any], fields: dict[str, st.SearchStrategy[Any]]
) -> st.SearchStrategy[Any]:
    """Mostly ``good`` with a few of ``fields`` changed or removed (so most tokens get deep
    into the checks), sometimes a whole random object, sometimes not an object at all."""
    changed = st.fixed_dictionaries({}, optional=fields)
    removed = st.sets(st.sampled_from(sorted(good)), max_size=2)
    near = st.builds(
        lambda change, drop: {k: v for k, v in (good | change).items() if k not in drop},
        changed,
        removed,
    )
    anything = st.dictionaries(st.text(max_size=8), json_values, max_size=4)
    return near | near | near | anything | json_values


# Half the headers are the good one, so the claims' checks get their share.
headers = st.just(GOOD_HEADER) | _varied(
    GOOD_HEADER,
    {
        "alg": st.sampled_from([*sorted(ALGORITHMS), "none", "HS256"]) | json_values,
        "kid": st.sampled_from(["k1", "other"]) | json_values,
        "typ": st.just("JWT") | json_values,
        "crit": st.lists(st.sampled_from(["b64", "exp", "x"]), max_size=2) | json_values,
        "b64": json_values,
        "x": json_values,
    },
)
claims = _varied(
    GOOD_CLAIMS,
    {
        "sub": st.sampled_from(["alice", ""]) | json_values,
        "exp": times,
        "iat": times,
        "nbf": times,
        "aud": json_values,
        "iss": json_values,
        "jti": json_values,
        "sessions": st.lists(strings, max_size=4) | json_values,
    },
)


@pytest.fixture(scope="module", params=[86_400.0, 0.0], ids=["lifetime-capped", "uncapped"])
def verifier(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Verifier:
    path: Path = tmp_path_factory.mktemp("fuzz") / "jwks.json"
    path.write_bytes(jwks(SIGNER))
    config = GatewayConfig(auth="jwt", jwt_keys=str(path), jwt_max_lifetime=request.param)
    return Verifier(config, FileKeys(str(path)))


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    running = asyncio.new_event_loop()
    yield running
    running.close()


def _check(verifier: Verifier, loop: asyncio.AbstractEventLoop, token: str) -> Grant | None:
    try:
        grant = loop.run_until_complete(verifier.verify(token))
    except InvalidToken as refused:
        assert str(refused) and refused.description
        return None
    # What a grant holds is what the routes and limits rely on.
    assert isinstance(grant.subject, str) and grant.subject
    assert all(isinstance(entry, str) for entry in grant.sessions)
    assert grant.expires is not None and math.isfinite(grant.expires)
    assert not grant.allows("")
    return grant


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(header=headers, payload=claims)
# What the review sent, and numbers past int64 and past any float, every run.
@example(header=GOOD_HEADER | {"alg": ["ES256"]}, payload=GOOD_CLAIMS)
@example(header=GOOD_HEADER | {"alg": {"ES256": 1}}, payload=GOOD_CLAIMS)
@example(header=GOOD_HEADER | {"kid": 1}, payload=GOOD_CLAIMS)
@example(header=GOOD_HEADER | {"crit": ["x"], "x": 1}, payload=GOOD_CLAIMS)
@example(header=GOOD_HEADER, payload=GOOD_CLAIMS | {"exp": 10**309})
@example(header=GOOD_HEADER, payload=GOOD_CLAIMS | {"exp": 2**64, "iat": -(2**64)})
@example(header=GOOD_HEADER, payload=GOOD_CLAIMS | {"exp": math.nan})
@example(header=GOOD_HEADER, payload=GOOD_CLAIMS | {"iat": math.inf})
@example(header=GOOD_HEADER, payload={k: v for k, v in GOOD_CLAIMS.items() if k != "sub"})
def test_verify_returns_a_grant_or_refuses_whatever_the_signed_token_holds(
    verifier: Verifier, loop: asyncio.AbstractEventLoop, header: Any, payload: Any
) -> None:
    granted = _check(verifier, loop, SIGNER.raw(header, payload))
    event("granted" if granted else "refused")


@settings(max_examples=300, deadline=None)
@example(token="\udcff.e30.e30")  # a header byte that is not UTF-8, as aiohttp passes it
@example(token=SIGNER.raw(GOOD_HEADER, GOOD_CLAIMS) + "\udcff")
@given(
    token=st.text()
    | st.text(st.characters(codec=None, categories=["Cs", "Ll", "Po"]))  # lone surrogates
    | st.lists(st.text(alphabet="AZaz09-_=.", max_size=40), min_size=1, max_size=5).map(".".join)
)
def test_verify_refuses_strings_that_are_not_tokens(
    verifier: Verifier, loop: asyncio.AbstractEventLoop, token: str
) -> None:
    assert _check(verifier, loop, token) is None


def test_the_fuzzed_shapes_do_reach_a_grant(
    verifier: Verifier, loop: asyncio.AbstractEventLoop
) -> None:
    """The strategies above can make a valid token (else the fuzz would only ever test the
    first refusal): the well-formed corner of them verifies."""
    # Issued now, not at import: a long suite may reach this test after GOOD_CLAIMS's exp.
    now = int(time.time())
    fresh = GOOD_CLAIMS | {"iat": now, "exp": now + 600}
    grant = _check(verifier, loop, SIGNER.raw(GOOD_HEADER, fresh))
    assert grant is not None and grant.allows("user-10") and not grant.allows("user-2")


@settings(max_examples=500, deadline=None)
@given(payload=claims, max_lifetime=st.sampled_from([0.0, 86_400.0]))
@example(payload=GOOD_CLAIMS | {"exp": 10**400, "iat": 1.5}, max_lifetime=86_400.0)
@example(payload=GOOD_CLAIMS | {"exp": 10**400, "iat": -(10**400)}, max_lifetime=86_400.0)
@example(payload=GOOD_CLAIMS | {"exp": math.nan}, max_lifetime=0.0)
@example(payload=GOOD_CLAIMS | {"exp": math.inf, "iat": -math.inf}, max_lifetime=0.0)
def test_the_grant_of_any_claims_is_a_grant_or_a_refusal(payload: Any, max_lifetime: float) -> None:
    """``grant_of`` alone, on claims PyJWT never saw (the verifier's last step, and the
    one the gateway wrote itself)."""
    if not isinstance(payload, dict):
        return
    try:
        grant = grant_of(payload, "sessions", 30.0, max_lifetime, now=NOW)
    except InvalidToken:
        return
    assert grant.subject and grant.expires is not None and math.isfinite(grant.expires)
