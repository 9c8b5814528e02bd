"""Bearer tokens: what a grant allows, which tokens verify, and keys that rotate."""

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from cryptography.hazmat.primitives import serialization

from stream.gateway.auth import (
    FileKeys,
    Grant,
    InvalidToken,
    UrlKeys,
    Verifier,
    grant_of,
    parse_keys,
)
from stream.gateway.config import GatewayConfig
from tests.unit.gateway.tokens import Signer, claims, hmac_signed, jwks, tampered, unsigned


# -- grants ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("prefixes", "session_id", "allowed"),
    [
        (("",), "anything", True),
        (("team-a/",), "team-a/s1", True),
        (("team-a/",), "team-a", False),
        (("team-a/",), "team-b/s1", False),
        (("team-a/", "s-9"), "s-9x", True),
        ((), "s", False),
    ],
)
def test_a_grant_allows_sessions_under_its_prefixes(
    prefixes: tuple[str, ...], session_id: str, allowed: bool
) -> None:
    assert Grant("u", prefixes, None).allows(session_id) is allowed


@pytest.mark.parametrize(
    ("prefixes", "asked", "listed"),
    [
        (("",), "", ("",)),
        (("",), "abc", ("abc",)),
        (("team-a/",), "", ("team-a/",)),
        (("team-a/",), "team-a/x", ("team-a/x",)),  # inside the grant: as asked
        (("team-a/x", "team-a/y", "team-b/"), "team-a/", ("team-a/x", "team-a/y")),
        (("team-a/",), "team-b", ()),  # nothing of it granted
        (("a", "ab", "b"), "", ("a", "b")),  # "ab" lies inside "a"
        ((), "", ()),
    ],
)
def test_a_listing_is_narrowed_to_the_grant(
    prefixes: tuple[str, ...], asked: str, listed: tuple[str, ...]
) -> None:
    assert Grant("u", prefixes, None).narrow(asked) == listed


def test_the_grant_of_claims() -> None:
    grant = grant_of({"sub": "u", "exp": 100, "sessions": ["a", "b", "a"]}, "sessions", 30)
    assert grant == Grant("u", ("a", "b"), 130.0)
    assert grant_of({"exp": 100}, "sessions", 0).prefixes == ()  # no claim: nothing
    assert grant_of({"exp": 1, "scope": [""]}, "scope", 0).prefixes == ("",)
    assert grant_of({"sub": 7, "exp": 1}, "sessions", 0).subject is None
    for bad in ("team-a/", [1], {"a": 1}, [None]):
        with pytest.raises(InvalidToken, match="not a list of strings"):
            grant_of({"exp": 1, "sessions": bad}, "sessions", 0)
    with pytest.raises(InvalidToken, match="prefixes"):
        grant_of({"exp": 1, "sessions": [str(i) for i in range(300)]}, "sessions", 0)


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
    grant = _verify(_verifier(tmp_path, signer), signer.token(["team-a/"]))
    assert grant.subject == "alice" and grant.prefixes == ("team-a/",)
    assert grant.expires is not None and grant.expires > time.time() + 300


def test_forgeries_and_stale_tokens_are_refused(tmp_path: Path) -> None:
    signer, stranger = Signer(), Signer()
    verifier = _verifier(tmp_path, signer, jwt_leeway=30)
    assert "expired" in _refused(verifier, signer.token([""], expires_in=-60))
    assert _verify(verifier, signer.token([""], expires_in=-10)).prefixes == ("",)  # leeway
    assert "exp" in _refused(verifier, signer.token([""], expires_in=None))
    assert "signature" in _refused(verifier, stranger.token([""]))  # a foreign key, same kid
    assert "signature" in _refused(verifier, tampered(signer.token(["team-a/"]), sessions=[""]))
    assert "'none'" in _refused(verifier, unsigned(claims([""])))
    # The public key as an HMAC secret, in both of its usual spellings.
    for secret in (signer.pem(), orjson.dumps(signer.jwk())):
        assert "'HS256'" in _refused(verifier, hmac_signed(secret, claims([""])))
    assert "malformed" in _refused(verifier, "not.a.token")
    assert "kid" in _refused(verifier, Signer(kid="k2").token([""]))


def test_audience_and_issuer_are_enforced_when_set(tmp_path: Path) -> None:
    signer = Signer()
    verifier = _verifier(tmp_path, signer, jwt_audience="ctx", jwt_issuer="https://idp")
    good = signer.token([""], aud="ctx", iss="https://idp")
    assert _verify(verifier, good).prefixes == ("",)
    assert "audience" in _refused(verifier, signer.token([""], aud="other", iss="https://idp"))
    assert "'aud'" in _refused(verifier, signer.token([""], iss="https://idp"))
    assert "issuer" in _refused(verifier, signer.token([""], aud="ctx", iss="https://idp.evil"))
    assert "'iss'" in _refused(verifier, signer.token([""], aud="ctx"))
    # Not configured: not checked.
    open_verifier = _verifier(tmp_path, signer)
    assert _verify(open_verifier, signer.token([""], aud="anyone")).prefixes == ("",)


def test_the_kid_picks_the_key_and_a_key_without_kid_serves_any(tmp_path: Path) -> None:
    first, second = Signer(kid="one"), Signer("ES256", kid="two")
    verifier = _verifier(tmp_path, first, second)
    assert _verify(verifier, first.token(["1"])).prefixes == ("1",)
    assert _verify(verifier, second.token(["2"])).prefixes == ("2",)
    plain = Signer(kid=None)
    pem = tmp_path / "key.pem"
    pem.write_bytes(plain.pem())
    from_pem = Verifier(GatewayConfig(auth="jwt"), FileKeys(str(pem)))
    assert _verify(from_pem, plain.token(["p"])).prefixes == ("p",)
    assert "signature" in _refused(from_pem, Signer(kid="x").token([""]))


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
    assert _verify(verifier, old.token(["o"])).prefixes == ("o",)
    assert "kid" in _refused(verifier, new.token(["n"]))
    staged = tmp_path / "jwks.json.new"
    staged.write_bytes(jwks(new))
    os.replace(staged, path)  # what a Secret update or `mv` does
    assert _verify(verifier, new.token(["n"])).prefixes == ("n",)
    assert "kid" in _refused(verifier, old.token(["o"]))
    # A broken rewrite keeps the last good keys.
    path.write_bytes(b"{half a file")
    assert _verify(verifier, new.token(["n"])).prefixes == ("n",)
    assert keys.loads == 2


def test_a_jwks_url_is_fetched_again_only_for_an_unknown_kid_after_a_cooldown() -> None:
    signer, rotated = Signer(kid="a"), Signer(kid="b")
    served = [orjson.loads(jwks(signer))]
    source = UrlKeys("https://idp.example/jwks", cooldown=0.2, fetch=lambda: served[-1])
    verifier = Verifier(GatewayConfig(auth="jwt"), source)

    async def go() -> None:
        assert (await verifier.verify(signer.token(["a"]))).prefixes == ("a",)
        assert (await verifier.verify(signer.token(["a"]))).prefixes == ("a",)
        assert source.fetches == 1  # cached
        served.append(orjson.loads(jwks(signer, rotated)))
        for _ in range(3):  # within the cooldown an unknown kid does not fetch
            with pytest.raises(InvalidToken):
                await verifier.verify(rotated.token(["b"]))
        assert source.fetches == 1
        await asyncio.sleep(0.25)
        assert (await verifier.verify(rotated.token(["b"]))).prefixes == ("b",)
        assert source.fetches == 2

    asyncio.run(go())
