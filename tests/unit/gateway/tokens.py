"""Keys and tokens for the gateway's tests: real keys made here, real JWTs signed by PyJWT,
and the forgeries a gateway must refuse (``alg: none``, HMAC keyed by the public key,
a tampered payload). Used by the unit tests and the integration tests alike."""

import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass, field
from typing import Any

import jwt
import orjson
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm, get_default_algorithms


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class Signer:
    """A private key and what the gateway is given of it (a JWK or a PEM)."""

    alg: str = "RS256"
    kid: str | None = "k1"
    private: Any = field(init=False)

    def __post_init__(self) -> None:
        if self.alg.startswith(("RS", "PS")):
            self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        elif self.alg == "ES256":
            self.private = ec.generate_private_key(ec.SECP256R1())
        elif self.alg == "EdDSA":
            self.private = ed25519.Ed25519PrivateKey.generate()
        else:
            raise ValueError(self.alg)

    def jwk(self) -> dict[str, Any]:
        public = self.private.public_key()
        if self.alg.startswith(("RS", "PS")):
            made = RSAAlgorithm.to_jwk(public, as_dict=True)
        elif self.alg == "ES256":
            made = ECAlgorithm.to_jwk(public, as_dict=True)
        else:
            made = OKPAlgorithm.to_jwk(public, as_dict=True)
        return made | ({"kid": self.kid} if self.kid else {}) | {"use": "sig"}

    def pem(self) -> bytes:
        return self.private.public_key().public_bytes(  # type: ignore[no-any-return]
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def token(
        self,
        sessions: list[str] | None = None,
        *,
        sub: str | None = "alice",
        expires_in: float | None = 300,
        claim: str = "sessions",
        **claims: Any,
    ) -> str:
        payload: dict[str, Any] = {"iat": int(time.time())}
        if sub is not None:
            payload["sub"] = sub
        if expires_in is not None:
            payload["exp"] = int(time.time() + expires_in)
        if sessions is not None:
            payload[claim] = sessions
        headers = {"kid": self.kid} if self.kid else None
        return jwt.encode(payload | claims, self.private, algorithm=self.alg, headers=headers)

    def raw(self, header: object, payload: object) -> str:
        """A token with exactly this header and payload (any JSON, ``NaN`` and huge
        numbers too: what Python's json module writes and PyJWT reads), signed with this
        key under its own algorithm whatever the header says, so a malformed header or
        claim reaches every check after the signature's."""
        signing = ".".join(_b64(json.dumps(part).encode()) for part in (header, payload))
        algorithm = get_default_algorithms()[self.alg]
        key = algorithm.prepare_key(self.private)
        return f"{signing}.{_b64(algorithm.sign(signing.encode(), key))}"


def jwks(*signers: Signer) -> bytes:
    return orjson.dumps({"keys": [s.jwk() for s in signers]})


def unsigned(claims: dict[str, Any]) -> str:
    """``alg: none``: no signature at all."""
    header = _b64(orjson.dumps({"alg": "none", "typ": "JWT"}))
    return f"{header}.{_b64(orjson.dumps(claims))}."


def hmac_signed(secret: bytes, claims: dict[str, Any], kid: str | None = "k1") -> str:
    """HS256 keyed by ``secret``: with the public key as the secret, the classic confusion
    of a verifier that lets the token choose its algorithm."""
    header: dict[str, Any] = {"alg": "HS256", "typ": "JWT"} | ({"kid": kid} if kid else {})
    signing = f"{_b64(orjson.dumps(header))}.{_b64(orjson.dumps(claims))}"
    mac = hmac.new(secret, signing.encode(), hashlib.sha256).digest()
    return f"{signing}.{_b64(mac)}"


def tampered(token: str, **claims: Any) -> str:
    """The token with its payload rewritten (``claims`` merged in), signature kept."""
    header, payload, signature = token.split(".")
    body = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return f"{header}.{_b64(orjson.dumps(body | claims))}.{signature}"


def claims(sessions: list[str], expires_in: float = 300, **extra: Any) -> dict[str, Any]:
    return {"sub": "mallory", "exp": int(time.time() + expires_in), "sessions": sessions} | extra
