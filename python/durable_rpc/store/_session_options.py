"""The checks of worker-session options and capabilities (pure: the decision's command
validation and the session calls share them)."""

from __future__ import annotations

from durable_rpc.errors import InvalidSessionOptionsError
from durable_rpc.v1 import options_pb2

#: Bounds on ids, capability keys and values (characters) and on their number.
MAX_SESSION_TEXT = 200
MAX_REQUIREMENTS = 32
#: Longest TTL a session may have: its deadlines are answered as Timestamps, which end
#: at the year 9999 (and held in 64-bit ms columns).
MAX_SESSION_TTL_SECONDS = 366 * 86_400


def _text(value: str, what: str) -> str:
    if not value or len(value) > MAX_SESSION_TEXT:
        raise InvalidSessionOptionsError(f"{what} must be 1 to {MAX_SESSION_TEXT} characters")
    return value


def validate_session_options(options: options_pb2.SessionOptions, where: str) -> None:
    """INVALID_SESSION_OPTIONS unless 0 < ttl <= MAX_SESSION_TTL_SECONDS, 0 < lease <=
    ttl, concurrency >= 0 and the id and requirements are of bounded size (``where``
    names the command or call)."""
    if options.ttl_seconds <= 0:
        raise InvalidSessionOptionsError(
            f"{where}: session ttl_seconds must be > 0, got {options.ttl_seconds}"
        )
    if options.ttl_seconds > MAX_SESSION_TTL_SECONDS:
        raise InvalidSessionOptionsError(
            f"{where}: session ttl_seconds must be at most {MAX_SESSION_TTL_SECONDS} "
            f"(366 days), got {options.ttl_seconds}"
        )
    if options.lease_seconds <= 0 or options.lease_seconds > options.ttl_seconds:
        raise InvalidSessionOptionsError(
            f"{where}: session lease_seconds must be > 0 and <= ttl_seconds "
            f"({options.ttl_seconds}), got {options.lease_seconds}"
        )
    if options.max_concurrent_activities < 0:
        raise InvalidSessionOptionsError(
            f"{where}: session max_concurrent_activities must be >= 0, got "
            f"{options.max_concurrent_activities}"
        )
    if options.session_id:
        _text(options.session_id, f"{where}: session_id")
    if len(options.requires) > MAX_REQUIREMENTS:
        raise InvalidSessionOptionsError(f"{where}: at most {MAX_REQUIREMENTS} requirements")
    for key, value in options.requires.items():
        _text(key, f"{where}: a session requirement's key")
        _text(value, f"{where}: session requirement {key!r}")


def validate_capabilities(capabilities: dict[str, str], max_sessions: int) -> None:
    if max_sessions <= 0:
        raise InvalidSessionOptionsError(
            f"max_concurrent_worker_sessions must be > 0, got {max_sessions}"
        )
    if len(capabilities) > MAX_REQUIREMENTS:
        raise InvalidSessionOptionsError(f"at most {MAX_REQUIREMENTS} capabilities")
    for key, value in capabilities.items():
        _text(key, "a capability's key")
        _text(value, f"capability {key!r}")
