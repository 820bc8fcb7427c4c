"""What the payload store answers (docs/engine.md, "Large payloads")."""

from __future__ import annotations

from dataclasses import dataclass

#: A namespace's payload quota unless an admin sets another: the bytes of payloads it
#: may hold, stored whole and being uploaded.
DEFAULT_PAYLOAD_QUOTA_BYTES = 10 * 2**30


@dataclass(frozen=True, slots=True)
class PayloadUpload:
    """The state of a payload after an upload call: the bytes stored, and whether the
    whole frame is stored and verified (it can be referenced)."""

    stored_bytes: int
    complete: bool
