"""API key secrets: made, recognised and checked without ever being stored.

A secret reads ``drpc_<key id>_<token>``. The key id (16 hex digits) is public: it names
the key in listings and logs and finds its row in one indexed lookup. The token is 256
random bits, so a plain SHA-256 of the whole secret is a safe thing to store (a slow
password hash protects low-entropy secrets; this one cannot be guessed) and it keeps the
check on every call cheap. Stored hashes are compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

PREFIX = "drpc"
_SECRET = re.compile(rf"^{PREFIX}_([0-9a-f]{{16}})_([A-Za-z0-9_-]{{43}})$")


@dataclass(frozen=True, slots=True)
class NewKey:
    """A key as made: ``secret`` is shown once to its owner and never kept."""

    key_id: str
    secret: str
    secret_hash: str


def new_key() -> NewKey:
    key_id = secrets.token_hex(8)
    secret = f"{PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"
    return NewKey(key_id, secret, hash_secret(secret))


def key_id_of(secret: str) -> str | None:
    """The key id a well-formed secret names, None for anything else."""
    match = _SECRET.match(secret)
    return match.group(1) if match else None


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def secret_matches(secret: str, secret_hash: str) -> bool:
    return hmac.compare_digest(hash_secret(secret), secret_hash)
