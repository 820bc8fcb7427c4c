"""The native module ``durable_rpc._core``, built from ``rust_core/`` with PyO3.

Pure Rust logic behind thin adapters: the Avro Value codec, the replay machine and
lease bookkeeping. Import the public facades (:mod:`durable_rpc.payload`, ...) rather
than this module.
"""

from typing import Any

from typing_extensions import disjoint_base

__all__ = [
    "MAX_DEPTH",
    "VALUE_SCHEMA_FINGERPRINT",
    "VALUE_SCHEMA_JSON",
    "PayloadError",
    "decode",
    "encode",
]

# --- Avro Value codec -------------------------------------------------------------

VALUE_SCHEMA_JSON: str
"""The Value schema (Avro JSON) shared with the Durable Workflow SDKs."""

VALUE_SCHEMA_FINGERPRINT: bytes
"""The schema's 8-byte CRC-64-AVRO fingerprint as written in frames (e2a33dff55802237)."""

MAX_DEPTH: int
"""Deepest nesting of lists and dicts accepted by encode and decode."""

@disjoint_base
class PayloadError(ValueError):
    """A value cannot be encoded, or a frame cannot be decoded.

    ``reason`` is stable: ``invalid_payload_framing``, ``unsupported_payload_schema``,
    ``non_finite_float``, ``integer_overflow``, ``invalid_map_key``,
    ``unsupported_value_type`` or ``nesting_too_deep``.
    """

    def __new__(cls, reason: str, message: str) -> PayloadError: ...
    @property
    def reason(self) -> str:
        """The stable reason code."""

    @property
    def message(self) -> str:
        """The human-readable explanation."""

def encode(value: object) -> bytes:
    """Encode None, bool, int (int64), finite float, bytes, bytearray, str, list or
    str-keyed dict as one single-object frame. Raises :class:`PayloadError`."""

def decode(data: bytes) -> Any:
    """Decode one frame into plain Python values. Raises :class:`PayloadError`."""
