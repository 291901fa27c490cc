"""Signed tokens (JWT): making them for the CLI, checking them for the broker.

A token's `sub` claim is the role it speaks for. HS256 tokens are signed with a
shared secret key; RS256 tokens with a private key and checked with its public
key, so the broker never holds what signs them. `exp` is honoured when present;
a token without one lasts until its key changes, as in Pulsar.
"""

from __future__ import annotations

import base64
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from stableline.broker.errors import BrokerError

SECRET_KEY_BYTES = 32
# RFC 7518 section 3.2: an HS256 key must be at least as long as the hash output.
MIN_SECRET_KEY_BYTES = 32
RSA_KEY_BITS = 2048
# Verified tokens kept so a client's every Fetch does not pay for a signature check.
MAX_CACHED_TOKENS = 1024


class AuthenticationFailed(BrokerError):
    """The credentials were missing or did not verify; the message says which."""

    code = "AuthenticationFailed"


def read_secret_key(path: Path | str) -> bytes:
    """A secret key file holds raw bytes (what `tokens create-secret-key` writes).

    A file written with `--base64` (or Pulsar's `data:;base64,` form) is decoded.
    A key shorter than MIN_SECRET_KEY_BYTES is refused: it can be guessed.
    """
    raw = Path(path).read_bytes()
    text = raw.strip()
    if text.startswith(b"data:;base64,"):
        key = base64.b64decode(text[len(b"data:;base64,") :])
    elif text.startswith(b"base64:"):
        key = base64.b64decode(text[len(b"base64:") :])
    else:
        key = raw
    if not key:
        raise ValueError(f"secret key file {path} is empty")
    if len(key) < MIN_SECRET_KEY_BYTES:
        raise ValueError(
            f"secret key file {path} holds a {len(key)}-byte key; HS256 needs at least "
            f"{MIN_SECRET_KEY_BYTES} bytes (RFC 7518): make one with "
            "`stableline tokens create-secret-key --output FILE`"
        )
    return key


def create_secret_key() -> bytes:
    return secrets.token_bytes(SECRET_KEY_BYTES)


def create_key_pair() -> tuple[bytes, bytes]:
    """(private key PEM, public key PEM) for RS256 tokens."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=RSA_KEY_BITS)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public


def create_token(
    subject: str,
    *,
    secret_key: bytes | None = None,
    private_key: bytes | None = None,
    expiry_seconds: float | None = None,
) -> str:
    """A token for role `subject`, HS256 with a secret key or RS256 with a private key."""
    if not subject:
        raise ValueError("a token needs a subject (the role)")
    if (secret_key is None) == (private_key is None):
        raise ValueError("give exactly one of a secret key or a private key")
    claims: dict[str, object] = {"sub": subject}
    if expiry_seconds is not None:
        if expiry_seconds <= 0:
            raise ValueError(f"expiry must be positive, got {expiry_seconds} s")
        claims["exp"] = int(time.time() + expiry_seconds)
    if secret_key is not None:
        return jwt.encode(claims, secret_key, algorithm="HS256")
    return jwt.encode(claims, private_key, algorithm="RS256")


def parse_duration(text: str) -> float:
    """'30s', '15m', '1h', '7d', '2w' or plain seconds -> seconds (Pulsar's --expiry-time)."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
    value = text.strip().lower()
    try:
        if value and value[-1] in units:
            seconds = float(value[:-1]) * units[value[-1]]
        else:
            seconds = float(value)
    except ValueError:
        raise ValueError(f"cannot read {text!r} as a duration: use e.g. 30s, 15m, 1h, 7d") from None
    if seconds <= 0:
        raise ValueError(f"duration {text!r} must be positive")
    return seconds


@dataclass(frozen=True, slots=True)
class _Verified:
    role: str
    expires_at: float | None


class TokenVerifier:
    """Checks bearer tokens against the broker's one key; returns the role."""

    def __init__(self, *, secret_key: bytes | None = None, public_key: bytes | None = None):
        if (secret_key is None) == (public_key is None):
            raise ValueError("token authentication needs exactly one of a secret or a public key")
        if secret_key is not None:
            self._key: object = secret_key
            self._algorithms = ["HS256"]
        else:
            self._key = serialization.load_pem_public_key(public_key)
            self._algorithms = ["RS256"]
        self._cache: OrderedDict[str, _Verified] = OrderedDict()

    def role_of(self, token: str) -> str:
        now = time.time()
        hit = self._cache.get(token)
        if hit is not None:
            if hit.expires_at is None or hit.expires_at > now:
                self._cache.move_to_end(token)
                return hit.role
            del self._cache[token]
            raise AuthenticationFailed("the token has expired")
        try:
            claims = jwt.decode(
                token,
                self._key,
                algorithms=self._algorithms,
                options={"require": ["sub"], "verify_aud": False},
            )
        except jwt.ExpiredSignatureError:
            raise AuthenticationFailed("the token has expired") from None
        except jwt.InvalidAlgorithmError:
            raise AuthenticationFailed(
                f"the token is not signed with {self._algorithms[0]}, the broker's algorithm"
            ) from None
        except jwt.InvalidSignatureError:
            raise AuthenticationFailed(
                "the token's signature does not verify with the broker's key"
            ) from None
        except jwt.InvalidTokenError as error:
            raise AuthenticationFailed(f"the token is not valid: {error}") from None
        role = claims["sub"]
        if not isinstance(role, str) or not role:
            raise AuthenticationFailed("the token's subject (the role) must be a non-empty string")
        expires = claims.get("exp")
        self._cache[token] = _Verified(role, float(expires) if expires is not None else None)
        if len(self._cache) > MAX_CACHED_TOKENS:
            self._cache.popitem(last=False)
        return role

    def expiry_of(self, token: str) -> float | None:
        """When a token that role_of() accepted expires (its `exp`), None if never."""
        hit = self._cache.get(token)
        if hit is None:
            self.role_of(token)
            hit = self._cache.get(token)
        return hit.expires_at if hit is not None else None


def bearer_token(header_value: str | None) -> str:
    """The token of an `authorization: Bearer <token>` value; raises when there is none."""
    if not header_value:
        raise AuthenticationFailed(
            "authentication is required: send 'authorization: Bearer <token>'"
        )
    scheme, _, token = header_value.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationFailed("the authorization header must be 'Bearer <token>'")
    return token.strip()
