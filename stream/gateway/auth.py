"""Bearer tokens: who may read which sessions (docs/gateway.md, "Authentication").

A token is a JWT signed with an asymmetric key (RS*, PS*, ES*, EdDSA; ``none`` and HMAC
are refused before any key is looked at, so a public key can never serve as an HMAC
secret). PyJWT checks the signature, ``exp`` (required), ``nbf``/``iat``, and the audience
and issuer when configured, with a small leeway. What the token grants is a ``Grant``: the
session-id prefixes of its claim (``sessions`` by default; ``""`` means every session).

Keys come from ``STREAM_GATEWAY_JWT_KEYS``: a file (a JWKS, one JWK, a PEM public key or
certificate) re-read when its inode, size or mtime changes, so keys rotate without a
restart; or an ``https://`` JWKS URL (PyJWKClient: cached, refetched for an unknown
``kid`` at most every 30 s).
"""

import asyncio
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import jwt
import orjson
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from stream.gateway.config import GatewayConfig

log = logging.getLogger(__name__)

RSA_ALGORITHMS: Final = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
EC_ALGORITHMS: Final = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
ALGORITHMS: Final = RSA_ALGORITHMS | frozenset(EC_ALGORITHMS.values()) | {"EdDSA"}
MAX_PREFIXES: Final = 256  # a claim longer than this is refused (each check walks the list)


class InvalidToken(Exception):
    """A token that grants nothing. ``str()`` is the reason for the log (never the token);
    ``description`` is what the client is told."""

    def __init__(self, reason: str, description: str = "the token is not valid") -> None:
        super().__init__(reason)
        self.description = description


@dataclass(frozen=True, slots=True)
class Grant:
    """What a request may read: sessions whose id starts with one of ``prefixes``."""

    subject: str | None  # the token's ``sub`` (limits count streams per subject)
    prefixes: tuple[str, ...]
    expires: float | None  # epoch seconds after which the grant ends (exp + leeway)

    def allows(self, session_id: str) -> bool:
        return any(session_id.startswith(p) for p in self.prefixes)

    def narrow(self, prefix: str) -> tuple[str, ...]:
        """The prefixes a listing for ``prefix`` may show: ``prefix`` itself when a grant
        covers it, else the granted prefixes that lie inside it (none: nothing to list)."""
        inside: list[str] = []
        for granted in self.prefixes:
            if prefix.startswith(granted):
                return (prefix,)
            if granted.startswith(prefix):
                inside.append(granted)
        # A prefix inside another one lists nothing the other does not.
        inside.sort()
        kept: list[str] = []
        for candidate in inside:
            if not any(candidate.startswith(k) for k in kept):
                kept.append(candidate)
        return tuple(kept)


EVERYTHING: Final = Grant(None, ("",), None)  # authentication off


def grant_of(claims: dict[str, Any], claim: str, leeway: float) -> Grant:
    """The grant of verified claims; a malformed claim is an invalid token (loud), a
    missing one grants nothing."""
    raw = claims.get(claim, [])
    if not isinstance(raw, list) or not all(isinstance(p, str) for p in raw):
        raise InvalidToken(f"claim {claim!r} is not a list of strings", f"bad {claim!r} claim")
    if len(raw) > MAX_PREFIXES:
        raise InvalidToken(f"claim {claim!r} has {len(raw)} prefixes (at most {MAX_PREFIXES})")
    subject = claims.get("sub")
    exp = claims.get("exp")
    return Grant(
        subject if isinstance(subject, str) else None,
        tuple(dict.fromkeys(raw)),
        float(exp) + leeway if isinstance(exp, int | float) else None,
    )


# -- keys ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Key:
    kid: str | None
    algorithms: frozenset[str]  # what this key may verify
    key: Any  # a cryptography public key object


def _algorithms_of(public_key: object) -> frozenset[str]:
    if isinstance(public_key, rsa.RSAPublicKey):
        return RSA_ALGORITHMS
    if isinstance(public_key, ec.EllipticCurvePublicKey):
        name = EC_ALGORITHMS.get(public_key.curve.name)
        return frozenset({name}) if name else frozenset()
    if isinstance(public_key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
        return frozenset({"EdDSA"})
    return frozenset()


def _jwk_key(entry: object) -> Key | None:
    """A JWK (a JSON object) as a verification key, or ``None`` when it is not one: a
    symmetric key, a key for encryption, a curve or type PyJWT does not know."""
    if not isinstance(entry, dict) or entry.get("use") not in (None, "sig"):
        return None
    try:
        jwk = jwt.PyJWK(entry)
    except (jwt.PyJWKError, jwt.InvalidKeyError, TypeError, ValueError) as error:
        log.warning("gateway: skipping an unusable JWK (%s)", error)
        return None
    algorithms = _algorithms_of(jwk.key)
    declared = entry.get("alg")
    if declared is not None:  # the key says which algorithm it is for: that one only
        algorithms = algorithms & {declared}
    return Key(jwk.key_id, algorithms, jwk.key) if algorithms else None


def jwks_keys(document: object) -> list[Key]:
    """The verification keys of a JWKS (``{"keys": [...]}``) or of a single JWK."""
    if not isinstance(document, dict):
        raise ValueError("a JWKS must be a JSON object")
    entries = document.get("keys", [document] if "kty" in document else None)
    if not isinstance(entries, list):
        raise ValueError("a JWKS needs a 'keys' list")
    return [k for k in map(_jwk_key, entries) if k is not None]


def parse_keys(data: bytes) -> list[Key]:
    """Verification keys of a file's content: a JWKS, one JWK, a PEM public key or a PEM
    certificate. Raises ValueError when it holds no usable public key."""
    text = data.strip()
    if text.startswith(b"{"):
        try:
            document = orjson.loads(text)
        except orjson.JSONDecodeError as error:
            raise ValueError(f"not valid JSON: {error}") from None
        keys = jwks_keys(document)
    elif b"-----BEGIN CERTIFICATE-----" in text:
        certified = x509.load_pem_x509_certificate(text).public_key()
        keys = [Key(None, _algorithms_of(certified), certified)]
    elif b"PRIVATE KEY-----" in text:
        raise ValueError("a private key: give the gateway the public key only")
    else:
        public = load_pem_public_key(text)
        keys = [Key(None, _algorithms_of(public), public)]
    keys = [k for k in keys if k.algorithms]
    if not keys:
        raise ValueError("no RSA, EC (P-256/384/521) or Ed25519/Ed448 public key in it")
    return keys


class KeySource:
    """Where the verification keys come from."""

    async def candidates(self, kid: str | None) -> Sequence[Key]:
        raise NotImplementedError


class FileKeys(KeySource):
    """A key file, re-read when it changes (a rename in place, a rewrite, a Secret update)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._keys: list[Key] = []
        self.loads = 0
        self._refresh()
        if not self._keys:
            raise ValueError(f"{path}: no usable key")

    def _refresh(self) -> None:
        try:
            status = os.stat(self.path)
        except OSError as error:
            if self._stamp is not None:  # keep the last good keys; say so once per change
                log.warning("gateway: cannot read the key file (%s); keeping its last keys", error)
                self._stamp = None
            elif not self._keys:
                raise ValueError(f"cannot read {self.path}: {error.strerror}") from None
            return
        stamp = (status.st_ino, status.st_size, status.st_mtime_ns)
        if stamp == self._stamp:
            return
        self._stamp = stamp  # a bad file is reported once, not once per request
        try:
            with open(self.path, "rb") as file:
                keys = parse_keys(file.read())
        except (OSError, ValueError) as error:
            if not self._keys:
                raise ValueError(f"{self.path}: {error}") from None
            log.warning(
                "gateway: the key file changed but is unusable (%s); keeping its last keys", error
            )
            return
        self._keys = keys
        self.loads += 1
        if self.loads > 1:
            log.info("gateway: key file reloaded: %d key(s)", len(keys))

    async def candidates(self, kid: str | None) -> Sequence[Key]:
        self._refresh()
        return _matching(self._keys, kid)


def _matching(keys: Sequence[Key], kid: str | None) -> list[Key]:
    if kid is None:
        return list(keys)
    return [k for k in keys if k.kid == kid or k.kid is None]


class UrlKeys(KeySource):
    """An https JWKS endpoint (an identity provider's ``jwks_uri``): fetched at most every
    ``lifespan`` seconds, and again for an unknown ``kid`` (a rotation) at most every
    ``cooldown`` seconds, so tokens with made-up kids cannot make the gateway hammer it."""

    def __init__(
        self,
        url: str,
        lifespan: float = 300.0,
        cooldown: float = 30.0,
        fetch: Callable[[], object] | None = None,
    ) -> None:
        self.url = url
        self.lifespan = lifespan
        self.cooldown = cooldown
        self._fetch = fetch or jwt.PyJWKClient(url, cache_jwk_set=False, timeout=5).fetch_data
        self._keys: list[Key] = []
        self._fetched = -float("inf")
        self._lock = asyncio.Lock()
        self.fetches = 0

    async def candidates(self, kid: str | None) -> Sequence[Key]:
        async with self._lock:
            age = time.monotonic() - self._fetched
            unknown = kid is not None and not any(k.kid == kid for k in self._keys)
            if age > self.lifespan or (unknown and age > self.cooldown):
                try:
                    document = await asyncio.to_thread(self._fetch)
                    self._keys = jwks_keys(document)
                except (jwt.PyJWKClientError, ValueError) as error:
                    log.warning("gateway: cannot fetch the JWKS (%s)", error)
                self._fetched = time.monotonic()
                self.fetches += 1
        return _matching(self._keys, kid)


def key_source(spec: str) -> KeySource:
    """The source ``STREAM_GATEWAY_JWT_KEYS`` names. Raises ValueError."""
    return UrlKeys(spec) if spec.startswith("https://") else FileKeys(spec)


# -- verification ----------------------------------------------------------------------
class Verifier:
    def __init__(
        self,
        config: GatewayConfig,
        keys: KeySource,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.keys = keys
        self.audience = config.jwt_audience
        self.issuer = config.jwt_issuer
        self.claim = config.jwt_claim
        self.leeway = config.jwt_leeway
        self.clock = clock

    async def verify(self, token: str) -> Grant:
        """The grant of a valid token; raises InvalidToken with the reason."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError as error:
            raise InvalidToken(f"malformed token ({error})", "malformed token") from None
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            # alg none, HS256 (a public key as the HMAC secret), anything unexpected.
            raise InvalidToken(f"algorithm {alg!r} not accepted", "algorithm not accepted")
        kid = header.get("kid")
        keys = [k for k in await self.keys.candidates(kid if isinstance(kid, str) else None)]
        keys = [k for k in keys if alg in k.algorithms]
        if not keys:
            raise InvalidToken(f"no {alg} key for kid {kid!r}", "unknown signing key")
        options: Any = {"require": ["exp"], "verify_aud": self.audience is not None}
        failure: jwt.InvalidTokenError | None = None
        for key in keys:
            try:
                claims = jwt.decode(
                    token,
                    key.key,
                    algorithms=[alg],
                    audience=self.audience,
                    issuer=self.issuer,
                    leeway=self.leeway,
                    options=options,
                )
            except jwt.InvalidSignatureError as error:
                failure = error  # maybe another key of the same kid (or none) verifies it
                continue
            except jwt.ExpiredSignatureError:
                raise InvalidToken("token expired", "the token expired") from None
            except jwt.InvalidAudienceError:
                raise InvalidToken("wrong audience", "wrong audience") from None
            except jwt.InvalidIssuerError:
                raise InvalidToken("wrong issuer", "wrong issuer") from None
            except jwt.MissingRequiredClaimError as error:
                raise InvalidToken(
                    f"no {error.claim!r} claim", f"no {error.claim!r} claim"
                ) from None
            except jwt.InvalidTokenError as error:
                raise InvalidToken(f"{type(error).__name__}: {error}") from None
            return grant_of(claims, self.claim, self.leeway)
        raise InvalidToken(f"signature does not verify ({failure})", "bad signature")
