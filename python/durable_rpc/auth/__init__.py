"""API keys and roles: who may call what (docs/security.md).

Pure logic, no I/O: the server looks keys up in its store and applies :func:`authorize`.
"""

from __future__ import annotations

from durable_rpc.auth._keys import NewKey, hash_secret, key_id_of, new_key, secret_matches
from durable_rpc.auth._policy import Access, Principal, Role, authorize

__all__ = [
    "Access",
    "NewKey",
    "Principal",
    "Role",
    "authorize",
    "hash_secret",
    "key_id_of",
    "new_key",
    "secret_matches",
]
