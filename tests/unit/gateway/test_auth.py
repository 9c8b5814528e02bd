"""Bearer tokens: what a grant allows, which tokens verify, and keys that rotate."""

import asyncio
import os
from pathlib import Path
from typing import Any

import jwt
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from cryptography.hazmat.primitives import serialization

from stream.gateway.auth import (
    FileKeys,
    Grant,
    InvalidToken,
    Listing,
    UrlKeys,
    Verifier,
    grant_of,
    parse_keys,
)
from stream.gateway.config import GatewayConfig
from tests.unit.gateway.tokens import Signer, claims, hmac_signed, jwks, tampered, unsigned
from tests.waiting import FakeClock


# -- grants ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("entries", "session_id", "allowed"),
    [
        (("user-1",), "user-1", True),  # an entry without ``*``: that one id
        (("user-1",), "user-10", False),
        (("user-1",), "user-1x", False),
        (("user-1",), "user-1/../admin", False),  # what user-1%2F..%2Fadmin decodes to
        (("user-1",), "user-1%2F..%2Fadmin", False),  # what user-1%252F... decodes to
        (("user-1",), "USER-1", False),
        (("user-1*",), "user-10", True),  # ``*`` at the end: a prefix
        (("user-1*",), "user-1", True),
        (("user-1*",), "user-2", False),
        (("acme",), "acme-corp/1", False),  # a tenant id is not a prefix of others
        (("acme/*",), "acme/1", True),
        (("acme/*",), "acme-corp/1", False),
        (("",), "anything", False),  # an empty entry grants nothing
        (("",), "", False),
        (("*",), "anything", True),
        (("*",), "", False),  # no session has the empty id
        (("a*b",), "a*b", True),  # ``*`` elsewhere is part of the id
        (("a*b",), "axb", False),
        (("team-a/*", "s-9"), "s-9", True),
        (("team-a/*", "s-9"), "s-9x", False),
        ((), "s", False),
    ],
)
def test_a_grant_allows_exactly_what_its_entries_say(
    entries: tuple[str, ...], session_id: str, allowed: bool
) -> None:
    assert Grant("u", entries, None).allows(session_id) is allowed


@pytest.mark.parametrize(
    ("entries", "asked", "listing"),
    [
        (("*",), "", Listing.ALL),
        (("*",), "abc", Listing.ALL),
        (("team-a/*",), "", Listing.FILTERED),
        (("team-a/*",), "team-a/x", Listing.ALL),  # inside the grant: as asked
        (("team-a/x", "team-b/*"), "team-a/", Listing.FILTERED),
        (("team-a/*",), "team-b", Listing.NOTHING),
        (("user-1",), "user-1", Listing.FILTERED),  # user-1 itself, not user-10
        (("user-1",), "user-10", Listing.NOTHING),
        (("",), "", Listing.NOTHING),
        ((), "", Listing.NOTHING),
    ],
)
def test_a_listing_is_narrowed_to_the_grant(
    entries: tuple[str, ...], asked: str, listing: Listing
) -> None:
    assert Grant("u", entries, None).listing(asked) is listing


def test_the_grant_of_claims() -> None:
    grant = grant_of({"sub": "u", "exp": 100, "sessions": ["a", "b*", "a"]}, "sessions", 30)
    assert grant == Grant("u", ("a", "b*"), 130.0)
    assert grant.exact == {"a"} and grant.prefixes == ("b",)
    assert grant_of({"sub": "u", "exp": 100}, "sessions", 0).sessions == ()  # no claim
    assert grant_of({"sub": "u", "exp": 1, "scope": ["*"]}, "scope", 0).sessions == ("*",)
    for bad in ("team-a/", [1], {"a": 1}, [None]):
        with pytest.raises(InvalidToken, match="not a list of strings"):
            grant_of({"sub": "u", "exp": 1, "sessions": bad}, "sessions", 0)
    with pytest.raises(InvalidToken, match="entries"):
        grant_of({"sub": "u", "exp": 1, "sessions": [str(i) for i in range(300)]}, "sessions", 0)
    # No subject, or not a usable one: the per-subject stream limit could not count it.
    for subject in (None, 7, "", ["u"]):
        with pytest.raises(InvalidToken, match="'sub'"):
            grant_of({"sub": subject, "exp": 1}, "sessions", 0)


def test_a_token_living_longer_than_the_cap_is_refused() -> None:
    day = 86_400.0
    assert grant_of({"sub": "u", "iat": 0, "exp": day}, "s", 0, day).expires == day
    with pytest.raises(InvalidToken, match="lifetime"):
        grant_of({"sub": "u", "iat": 0, "exp": day + 1}, "s", 0, day)
    # Without ``iat`` the lifetime left counts, from now.
    assert grant_of({"sub": "u", "exp": 1000 + day}, "s", 0, day, now=1000).expires
    with pytest.raises(InvalidToken, match="lifetime"):
        grant_of({"sub": "u", "exp": 1001 + day}, "s", 0, day, now=1000)
    with pytest.raises(InvalidToken, match="lifetime"):
        grant_of({"sub": "u", "iat": 0, "exp": 10**400}, "s", 0, day)  # beyond any float
    # 0: no cap (and an exp beyond any float still makes a finite expiry).
    assert grant_of({"sub": "u", "iat": 0, "exp": 10**400}, "s", 0, 0).expires == 1e300


# -- verification ----------------------------------------------------------------------
def _verifier(tmp_path: Path, *signers: Signer, **config: Any) -> Verifier:
    path = tmp_path / "jwks.json"
    path.write_bytes(jwks(*signers))
    return Verifier(GatewayConfig(auth="jwt", jwt_keys=str(path), **config), FileKeys(str(path)))


def _verify(verifier: Verifier, token: str) -> Grant:
    return asyncio.run(verifier.verify(token))


def _refused(verifier: Verifier, token: str) -> str:
    with pytest.raises(InvalidToken) as refused:
        _verify(verifier, token)
    return str(refused.value)


@pytest.mark.parametrize("alg", ["RS256", "PS256", "ES256", "EdDSA"])
def test_asymmetric_tokens_verify(tmp_path: Path, alg: str) -> None:
    signer = Signer(alg)
    verifier, token = _verifier(tmp_path, signer), signer.token(["team-a/"])
    grant = _verify(verifier, token)
    assert grant.subject == "alice" and grant.sessions == ("team-a/",)
    exp = jwt.decode(token, options={"verify_signature": False})["exp"]
    assert grant.expires == exp + verifier.leeway  # the token's end, with the leeway


def test_forgeries_and_stale_tokens_are_refused(tmp_path: Path) -> None:
    signer, stranger = Signer(), Signer()
    verifier = _verifier(tmp_path, signer, jwt_leeway=30)
    assert "expired" in _refused(verifier, signer.token(["*"], expires_in=-60))
    assert _verify(verifier, signer.token(["*"], expires_in=-10)).sessions == ("*",)  # leeway
    assert "exp" in _refused(verifier, signer.token(["*"], expires_in=None))
    assert "signature" in _refused(verifier, stranger.token(["*"]))  # a foreign key, same kid
    assert "signature" in _refused(verifier, tampered(signer.token(["team-a/*"]), sessions=["*"]))
    assert "'none'" in _refused(verifier, unsigned(claims(["*"])))
    # The public key as an HMAC secret, in both of its usual spellings.
    for secret in (signer.pem(), orjson.dumps(signer.jwk())):
        assert "'HS256'" in _refused(verifier, hmac_signed(secret, claims(["*"])))
    assert "malformed" in _refused(verifier, "not.a.token")
    assert "kid" in _refused(verifier, Signer(kid="k2").token(["*"]))


def test_audience_and_issuer_are_enforced_when_set(tmp_path: Path) -> None:
    signer = Signer()
    verifier = _verifier(tmp_path, signer, jwt_audience="ctx", jwt_issuer="https://idp")
    good = signer.token(["*"], aud="ctx", iss="https://idp")
    assert _verify(verifier, good).sessions == ("*",)
    assert "audience" in _refused(verifier, signer.token(["*"], aud="other", iss="https://idp"))
    assert "'aud'" in _refused(verifier, signer.token(["*"], iss="https://idp"))
    assert "issuer" in _refused(verifier, signer.token(["*"], aud="ctx", iss="https://idp.evil"))
    assert "'iss'" in _refused(verifier, signer.token(["*"], aud="ctx"))
    # Not configured: not checked.
    open_verifier = _verifier(tmp_path, signer)
    assert _verify(open_verifier, signer.token(["*"], aud="anyone")).sessions == ("*",)


def test_the_kid_picks_the_key_and_a_key_without_kid_serves_any(tmp_path: Path) -> None:
    first, second = Signer(kid="one"), Signer("ES256", kid="two")
    verifier = _verifier(tmp_path, first, second)
    assert _verify(verifier, first.token(["1"])).sessions == ("1",)
    assert _verify(verifier, second.token(["2"])).sessions == ("2",)
    plain = Signer(kid=None)
    pem = tmp_path / "key.pem"
    pem.write_bytes(plain.pem())
    from_pem = Verifier(GatewayConfig(auth="jwt"), FileKeys(str(pem)))
    assert _verify(from_pem, plain.token(["p"])).sessions == ("p",)
    assert "signature" in _refused(from_pem, Signer(kid="x").token(["*"]))


# -- keys ------------------------------------------------------------------------------
def test_key_files_hold_only_usable_public_keys() -> None:
    signer = Signer()
    mixed = {"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "h"}, signer.jwk()]}
    (key,) = parse_keys(orjson.dumps(mixed))  # the symmetric key is not a verification key
    assert key.kid == "k1" and "RS256" in key.algorithms and "HS256" not in key.algorithms
    (pinned,) = parse_keys(orjson.dumps(signer.jwk() | {"alg": "PS256"}))
    assert pinned.algorithms == {"PS256"}
    with pytest.raises(ValueError, match="no RSA"):
        parse_keys(orjson.dumps({"keys": [signer.jwk() | {"use": "enc"}]}))
    with pytest.raises(ValueError, match="private key"):
        parse_keys(
            signer.private.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    with pytest.raises(ValueError):
        parse_keys(b"{not json")


def test_a_rewritten_key_file_rotates_the_keys(tmp_path: Path) -> None:
    old, new = Signer(kid="old"), Signer(kid="new")
    path = tmp_path / "jwks.json"
    path.write_bytes(jwks(old))
    keys = FileKeys(str(path))
    verifier = Verifier(GatewayConfig(auth="jwt"), keys)
    assert _verify(verifier, old.token(["o"])).sessions == ("o",)
    assert "kid" in _refused(verifier, new.token(["n"]))
    staged = tmp_path / "jwks.json.new"
    staged.write_bytes(jwks(new))
    os.replace(staged, path)  # what a Secret update or `mv` does
    assert _verify(verifier, new.token(["n"])).sessions == ("n",)
    assert "kid" in _refused(verifier, old.token(["o"]))
    # A broken rewrite keeps the last good keys.
    path.write_bytes(b"{half a file")
    assert _verify(verifier, new.token(["n"])).sessions == ("n",)
    assert keys.loads == 2


def test_a_jwks_url_is_fetched_again_only_for_an_unknown_kid_after_a_cooldown() -> None:
    signer, rotated = Signer(kid="a"), Signer(kid="b")
    served = [orjson.loads(jwks(signer))]

    async def fetch() -> object:
        return served[-1]

    clock = FakeClock()
    source = UrlKeys("https://idp.example/jwks", cooldown=0.2, fetch=fetch, clock=clock)
    verifier = Verifier(GatewayConfig(auth="jwt"), source)

    async def go() -> None:
        assert (await verifier.verify(signer.token(["a"]))).sessions == ("a",)
        assert (await verifier.verify(signer.token(["a"]))).sessions == ("a",)
        assert source.fetches == 1  # cached
        served.append(orjson.loads(jwks(signer, rotated)))
        for _ in range(3):  # within the cooldown an unknown kid does not fetch
            with pytest.raises(InvalidToken):
                await verifier.verify(rotated.token(["b"]))
        assert source.fetches == 1
        clock.advance(0.25)
        assert (await verifier.verify(rotated.token(["b"]))).sessions == ("b",)
        assert source.fetches == 2

    asyncio.run(go())


def test_every_jwks_fetch_failure_keeps_the_last_keys_and_waits_the_cooldown() -> None:
    """A real HTTP server on a loopback port answers each fetch its own way."""
    signer = Signer(kid="a")
    good = jwks(signer)
    answers: list[str] = []

    async def serve(request: web.Request) -> web.StreamResponse:
        how = answers.pop(0)
        if how == "huge":  # a body past the bound, sent without a length
            response = web.StreamResponse()
            await response.prepare(request)
            for _ in range(40):
                await response.write(b" " * 10_000)
            return response
        if how == "cut":  # a length promised, the connection dropped halfway
            response = web.StreamResponse(headers={"Content-Length": str(len(good))})
            await response.prepare(request)
            await response.write(good[:20])
            assert request.transport is not None
            request.transport.abort()
            return response
        if how == "slow":  # past the fetch's timeout: the delay is what is tested
            await asyncio.sleep(2)
        if how == "redirect":
            raise web.HTTPFound("https://elsewhere.example/jwks")
        bodies = {"bad json": b"{not json", "not a jwks": b"[1, 2]", "error": b""}
        status = 500 if how == "error" else 200
        return web.Response(body=bodies.get(how, good), status=status)

    async def go() -> None:
        app = web.Application()
        app.router.add_get("/jwks", serve)
        async with TestServer(app) as server:
            url = str(server.make_url("/jwks"))
            clock = FakeClock()
            source = UrlKeys(url, cooldown=0.3, timeout=0.5, clock=clock)
            stranger = Signer(kid="unknown").token(["a"])
            verifier = Verifier(GatewayConfig(auth="jwt"), source)
            answers.append("ok")
            assert (await verifier.verify(signer.token(["a"]))).sessions == ("a",)
            failures = ["huge", "cut", "slow", "bad json", "not a jwks", "error", "redirect"]
            for how in failures:
                answers.append(how)
                clock.advance(0.35)  # past the cooldown: an unknown kid fetches
                with pytest.raises(InvalidToken, match="kid"):
                    await verifier.verify(stranger)
                assert source.failures == failures.index(how) + 1, how
                # The last good keys still verify, and within the cooldown nothing fetches.
                fetches = source.fetches
                for _ in range(3):
                    with pytest.raises(InvalidToken):
                        await verifier.verify(stranger)
                assert (await verifier.verify(signer.token(["a"]))).sessions == ("a",)
                assert source.fetches == fetches
            assert not answers

    asyncio.run(go())


def test_a_token_whose_key_is_cached_never_waits_for_a_slow_jwks_endpoint() -> None:
    """A real HTTP server that holds its answer until released: the refresh an unknown kid
    (or the keys' age) starts is in flight the whole time cached-key tokens are checked."""
    signer = Signer(kid="a")
    arrived, release = asyncio.Event(), asyncio.Event()
    served: list[str] = []

    async def serve(request: web.Request) -> web.Response:
        served.append(request.path)
        if len(served) > 1:  # every fetch after the first hangs until released
            arrived.set()
            await release.wait()
        return web.Response(body=jwks(signer))

    async def go() -> None:
        app = web.Application()
        app.router.add_get("/jwks", serve)
        async with TestServer(app) as server:
            clock = FakeClock()
            source = UrlKeys(str(server.make_url("/jwks")), cooldown=30, timeout=30, clock=clock)
            verifier = Verifier(GatewayConfig(auth="jwt"), source)
            assert (await verifier.verify(signer.token(["a"]))).sessions == ("a",)
            clock.now += 31
            stranger = asyncio.create_task(verifier.verify(Signer(kid="new").token(["a"])))
            await asyncio.wait_for(arrived.wait(), 10)  # the refresh is at the server
            # The fetch hangs until released: were a cached key's token to wait for it,
            # the gather would not end and the wait_for would fail.
            cached = [verifier.verify(signer.token([f"s{i}"])) for i in range(50)]
            grants = await asyncio.wait_for(asyncio.gather(*cached), 10)
            assert [g.sessions for g in grants] == [(f"s{i}",) for i in range(50)]
            assert not stranger.done() and source.fetches == 2
            # Keys past their lifespan: a background refresh, the cached keys answer now.
            release.set()
            with pytest.raises(InvalidToken, match="kid"):
                await stranger
            arrived.clear()
            release.clear()
            clock.now += 301
            assert (await verifier.verify(signer.token(["b"]))).sessions == ("b",)
            await asyncio.wait_for(arrived.wait(), 10)
            assert (await verifier.verify(signer.token(["c"]))).sessions == ("c",)
            assert source.fetches == 3  # the one in flight, not one per token
            release.set()
            assert len(served) == 3

    asyncio.run(go())


def test_a_flood_of_unknown_kids_fetches_once_per_cooldown() -> None:
    signer = Signer(kid="a")
    gate = asyncio.Event()

    async def fetch() -> object:
        await gate.wait()
        return orjson.loads(jwks(signer))

    async def go() -> None:
        clock = FakeClock()
        source = UrlKeys("https://idp.example/jwks", cooldown=30, fetch=fetch, clock=clock)
        verifier = Verifier(GatewayConfig(auth="jwt"), source)
        strangers = [Signer(kid=f"x{i}", alg="ES256") for i in range(5)]

        async def refused(token: str) -> None:
            with pytest.raises(InvalidToken, match="kid"):
                await verifier.verify(token)

        # The first tokens wait for the first fetch, all of them for the same one.
        flood = [refused(strangers[i % 5].token(["a"])) for i in range(200)]
        first = asyncio.gather(verifier.verify(signer.token(["a"])), *flood)
        await asyncio.sleep(0)
        gate.set()
        await asyncio.wait_for(first, 10)
        assert source.fetches == 1
        for elapsed in (1, 15, 29):  # within the cooldown: refused at once, nothing fetched
            clock.now = 1000 + elapsed
            await asyncio.wait_for(
                asyncio.gather(*(refused(strangers[i % 5].token(["a"])) for i in range(200))), 10
            )
            assert source.fetches == 1
        clock.now = 1000 + 31  # past it: one fetch for the whole flood
        await asyncio.wait_for(
            asyncio.gather(*(refused(strangers[i % 5].token(["a"])) for i in range(200))), 10
        )
        assert source.fetches == 2

    asyncio.run(go())
