"""The payload codec: plain Python values <-> Avro Value single-object frames.

A thin facade over the Rust codec in :mod:`durable_rpc._core`; see
:mod:`durable_rpc.converter` for dataclasses, datetimes and other richer types.
"""

from __future__ import annotations

from durable_rpc._core import (
    MAX_DEPTH,
    VALUE_SCHEMA_FINGERPRINT,
    VALUE_SCHEMA_JSON,
    PayloadError,
    decode,
    encode,
    validate,
)

__all__ = [
    "MAX_DEPTH",
    "VALUE_SCHEMA_FINGERPRINT",
    "VALUE_SCHEMA_JSON",
    "PayloadError",
    "decode",
    "encode",
    "validate",
]
