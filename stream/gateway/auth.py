"""Bearer tokens: who may read which sessions (docs/gateway.md, "Authentication").

A token is a JWT signed with an asymmetric key (RS*, PS*, ES*, EdDSA; ``none`` and HMAC
are refused before any key is looked at, so a public key can never serve as an HMAC
secret). PyJWT checks the signature, ``exp`` and ``sub`` (required), ``nbf``/``iat``, and
the audience and issuer when configured, with a small leeway; a lifetime (``exp - iat``)
over ``STREAM_GATEWAY_JWT_MAX_LIFETIME`` is refused. What the token grants is a ``Grant``:
the entries of its claim (``sessions`` by default): ``"*"`` every session, ``"p*"`` the ids
starting with ``p``, anything else that one id. Whatever a token holds, ``verify`` returns
a grant or raises ``InvalidToken``.

Keys come from ``STREAM_GATEWAY_JWT_KEYS``: a file (a JWKS, one JWK, a PEM public key or
certificate) re-read when its inode, size or mtime changes, so keys rotate without a
restart; or an ``https://`` JWKS URL (cached, refreshed by one fetch at a time that tokens
with a cached key never wait for, fetched for an unknown ``kid`` at most every
``STREAM_GATEWAY_JWKS_INTERVAL`` (30 s), each answer bounded in size and time).
"""

import asyncio
import enum
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp
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
MAX_ENTRIES: Final = 256  # a longer grant claim is refused (each listing walks it)
EVERY: Final = "*"  # the grant entry for every session
MAX_JWKS_BYTES: Final = 256 * 1024  # a JWKS answer larger than this is refused unread


class InvalidToken(Exception):
    """A token that grants nothing. ``str()`` is the reason for the log (never the token);
    ``description`` is what the client is told."""

    def __init__(self, reason: str, description: str = "the token is not valid") -> None:
        super().__init__(reason)
        self.description = description


@dataclass(frozen=True, slots=True)
class Grant:
    """What a request may read, from the entries of the token's claim: ``"*"`` every
    session, ``"team-a/*"`` every id starting with ``team-a/``, anything else exactly that
    one id (``""`` none). Ids are the decoded ones the routes read from Redis."""

    subject: str | None  # the token's ``sub`` (``None`` only with authentication off)
    sessions: tuple[str, ...]  # the claim's entries, as the token wrote them
    expires: float | None  # epoch seconds after which the grant ends (exp + leeway)
    exact: frozenset[str] = field(init=False, repr=False, compare=False)
    # ``""`` (from ``"*"``): every session.
    prefixes: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        prefixes = tuple(e[:-1] for e in self.sessions if e.endswith(EVERY))
        exact = frozenset(e for e in self.sessions if e and not e.endswith(EVERY))
        object.__setattr__(self, "prefixes", prefixes)
        object.__setattr__(self, "exact", exact)

    def allows(self, session_id: str) -> bool:
        return bool(session_id) and (
            session_id in self.exact or session_id.startswith(self.prefixes)
        )

    def listing(self, prefix: str) -> "Listing":
        """What a listing of the ids starting with ``prefix`` may show."""
        if prefix.startswith(self.prefixes):
            return Listing.ALL  # a granted prefix covers the whole range asked for
        if any(p.startswith(prefix) for p in (*self.prefixes, *self.exact)):
            return Listing.FILTERED  # some of it: each row is checked with ``allows``
        return Listing.NOTHING


class Listing(enum.Enum):
    ALL = "all"
    FILTERED = "filtered"
    NOTHING = "nothing"


EVERYTHING: Final = Grant(None, (EVERY,), None)  # authentication off


def _seconds_of(claims: dict[str, Any], name: str) -> float | None:
    """A time claim as a float within +-1e300 (``None``: not a number of seconds). An int
    past a float's range would make the arithmetic on it raise OverflowError; min and max
    compare ints and floats exactly, without converting. bool is an int to Python, not a
    time to JWT. (PyJWT has refused NaN and the infinities already: this does not rely
    on it.)"""
    value = claims.get(name)
    if not isinstance(value, int | float) or isinstance(value, bool) or value != value:
        return None  # value != value: NaN
    return float(max(min(value, 1e300), -1e300))


def grant_of(
    claims: dict[str, Any],
    claim: str,
    leeway: float,
    max_lifetime: float = 0.0,
    now: float | None = None,
) -> Grant:
    """The grant of verified claims; a malformed claim is an invalid token (loud), a
    missing one grants nothing. ``max_lifetime`` (0: none) caps ``exp - iat`` (``exp -
    now`` without ``iat``)."""
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        # The per-subject stream limit counts by it: a token without one would escape it.
        raise InvalidToken("no 'sub' claim", "no 'sub' claim")
    raw = claims.get(claim, [])
    if not isinstance(raw, list) or not all(isinstance(p, str) for p in raw):
        raise InvalidToken(f"claim {claim!r} is not a list of strings", f"bad {claim!r} claim")
    if len(raw) > MAX_ENTRIES:
        raise InvalidToken(f"claim {claim!r} has {len(raw)} entries (at most {MAX_ENTRIES})")
    exp = _seconds_of(claims, "exp")
    if exp is None:
        raise InvalidToken("no 'exp' claim", "no 'exp' claim")
    if max_lifetime:
        issued = _seconds_of(claims, "iat")
        if issued is None:
            issued = time.time() if now is None else now
        lifetime = exp - issued
        if not lifetime <= max_lifetime:
            raise InvalidToken(
                f"token lifetime over {max_lifetime:g} s", "the token lives too long"
            )
    return Grant(subject, tuple(dict.fromkeys(raw)), exp + leeway)


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


async def fetch_jwks(url: str, timeout: float = 5.0, limit: int = MAX_JWKS_BYTES) -> object:
    """The JSON document at ``url``, read to at most ``limit`` bytes within ``timeout``
    seconds. Raises OSError, aiohttp.ClientError, TimeoutError or ValueError."""
    # No redirects: one could lead off https (the URL is checked to be https at start).
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
        session.get(url, allow_redirects=False, headers={"Accept": "application/json"}) as answer,
    ):
        if answer.status != 200:
            raise ValueError(f"HTTP {answer.status}")
        if answer.content_length is not None and answer.content_length > limit:
            raise ValueError(f"{answer.content_length} bytes (at most {limit})")
        body = bytearray()
        async for chunk in answer.content.iter_any():
            body += chunk
            if len(body) > limit:
                raise ValueError(f"over {limit} bytes")
    return orjson.loads(body)


class UrlKeys(KeySource):
    """An https JWKS endpoint (an identity provider's ``jwks_uri``), fetched by one refresh
    at a time that no token with a cached key waits for:

    - a ``kid`` the cached keys hold is served from them at once; past ``lifespan``
      seconds a refresh starts in the background and the cached keys serve meanwhile;
    - an unknown ``kid`` (a rotation), or any token while there are no keys, starts a
      refresh at most every ``cooldown`` seconds, globally, and waits for the one in
      flight; within the cooldown with none in flight it is refused at once. A flood of
      made-up kids therefore costs the identity provider one fetch per cooldown whatever
      the number of clients or addresses, and a key published after the last fetch is
      picked up within one cooldown, flood or not.

    A failed fetch (any I/O error, a timeout, an answer too large or not a JWKS) keeps the
    last keys and counts for the cooldown like any other."""

    def __init__(
        self,
        url: str,
        lifespan: float = 300.0,
        cooldown: float = 30.0,
        fetch: Callable[[], Awaitable[object]] | None = None,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.lifespan = lifespan
        self.cooldown = cooldown
        self._fetch = fetch or (lambda: fetch_jwks(url, timeout))
        self._clock = clock
        self._keys: list[Key] = []
        self._fetched = -float("inf")  # when the last refresh ended: both intervals count from it
        self._refresh: asyncio.Task[None] | None = None  # the one in flight
        self.fetches = 0
        self.failures = 0

    def _known(self, kid: str | None) -> bool:
        return bool(self._keys) and (kid is None or any(k.kid == kid for k in self._keys))

    def _start(self) -> "asyncio.Task[None]":
        """The refresh in flight, started now when there is none."""
        if self._refresh is None:
            self.fetches += 1
            self._refresh = asyncio.create_task(self._refreshed(), name="jwks-refresh")
        return self._refresh

    async def _refreshed(self) -> None:
        try:
            self._keys = jwks_keys(await self._fetch())
        except Exception as error:
            # The endpoint's answer is not ours to trust: whatever it does, the last keys
            # stay (the waiters then refuse the unknown kid; nobody gets a 500).
            self.failures += 1
            log.warning(
                "gateway: cannot fetch the JWKS (%s: %s); keeping its last keys",
                type(error).__name__,
                error,
            )
        finally:
            # From the end: a slow endpoint is not asked again the moment it answers.
            self._fetched = self._clock()
            self._refresh = None

    async def candidates(self, kid: str | None) -> Sequence[Key]:
        age = self._clock() - self._fetched
        if self._known(kid):
            if age > self.lifespan:
                self._start()  # in the background: the cached keys answer this token
            return _matching(self._keys, kid)
        refresh = self._refresh
        if refresh is None and age > self.cooldown:
            refresh = self._start()
        if refresh is not None:
            # Shielded: a client that goes away does not cancel the others' refresh.
            await asyncio.shield(refresh)
        return _matching(self._keys, kid)


def key_source(spec: str, interval: float = 30.0) -> KeySource:
    """The source ``STREAM_GATEWAY_JWT_KEYS`` names; ``interval`` is a JWKS URL's cooldown
    (``STREAM_GATEWAY_JWKS_INTERVAL``). Raises ValueError."""
    return UrlKeys(spec, cooldown=interval) if spec.startswith("https://") else FileKeys(spec)


# -- verification ----------------------------------------------------------------------
def _shown(value: object) -> str:
    """A header value for the log: its repr, cut short (a header can be kilobytes)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


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
        self.max_lifetime = config.jwt_max_lifetime
        self.clock = clock

    async def verify(self, token: str) -> Grant:
        """The grant of a valid token; raises InvalidToken with the reason, and nothing
        else whatever the token holds (tests/unit/gateway/test_fuzz.py)."""
        if not token.isascii():
            # A JWT is base64url and dots. aiohttp hands undecodable header bytes over as
            # lone surrogates, on which PyJWT's own encode() would raise UnicodeEncodeError.
            raise InvalidToken("not ASCII", "malformed token")
        try:
            # PyJWT checks the header's shape: a JSON object, ``kid`` a string, ``crit``
            # a list of extensions it implements.
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as error:
            raise InvalidToken(f"malformed token ({error})", "malformed token") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in ALGORITHMS:
            # alg none, HS256 (a public key as the HMAC secret), a list, anything else.
            raise InvalidToken(f"algorithm {_shown(alg)} not accepted", "algorithm not accepted")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise InvalidToken(f"kid {_shown(kid)} is not a string", "malformed token")
        keys = [k for k in await self.keys.candidates(kid) if alg in k.algorithms]
        if not keys:
            raise InvalidToken(f"no {alg} key for kid {_shown(kid)}", "unknown signing key")
        claims = self._decode(token, alg, keys)
        return grant_of(claims, self.claim, self.leeway, self.max_lifetime, self.clock())

    def _decode(self, token: str, alg: str, keys: Sequence[Key]) -> dict[str, Any]:
        options: Any = {"require": ["exp", "sub"], "verify_aud": self.audience is not None}
        failure: Exception | None = None
        for key in keys:
            try:
                claims: dict[str, Any] = jwt.decode(
                    token,
                    key.key,
                    algorithms=[alg],
                    audience=self.audience,
                    issuer=self.issuer,
                    leeway=self.leeway,
                    options=options,
                )
                return claims
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
            except Exception as error:
                # PyJWT raises InvalidTokenError for a bad token (the fuzz test has found
                # nothing else), but a token is untrusted input: should some other error
                # escape the decoder for some input, it is a refusal too, never a 500.
                raise InvalidToken(f"unreadable token ({type(error).__name__})") from None
        raise InvalidToken(f"signature does not verify ({failure})", "bad signature")
