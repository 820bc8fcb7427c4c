"""Typed values <-> plain Values, driven by type hints.

The raw codec (:mod:`durable_rpc.payload`) carries only None, bool, int, float, bytes,
str, list and str-keyed dict. This layer maps richer Python values onto those and back:

=====================  ==========================================  =====================
Python type            Value                                       back, given the hint
=====================  ==========================================  =====================
dataclass              map of its fields                           the dataclass
pydantic model         map from ``model_dump()``                   ``model_validate``
datetime / date        ISO-8601 string                             datetime / date
UUID, Decimal          string                                      UUID, Decimal
Enum                   its value                                   the Enum member
tuple, set, frozenset  list                                        tuple / set / ...
=====================  ==========================================  =====================

Without a hint (``Any``) a value comes back in its plain form.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import inspect
import types
import typing
import uuid
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from functools import lru_cache
from typing import Any

from durable_rpc import payload


class ConversionError(payload.PayloadError):
    """A value cannot be converted to or from the type its hint names."""


def _error(reason: str, message: str) -> ConversionError:
    return ConversionError(reason, message)


def to_value(obj: object) -> Any:
    """Convert ``obj`` into a plain value the codec accepts."""
    if obj is None or isinstance(obj, (bool, int, float, str, bytes)):
        if isinstance(obj, enum.Enum):
            return to_value(obj.value)
        return obj
    if isinstance(obj, enum.Enum):
        return to_value(obj.value)
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            if not isinstance(key, str):
                key = to_value(key)
                if not isinstance(key, str):
                    raise _error("invalid_map_key", f"map keys must be str, got {type(key)!r}")
            out[key] = to_value(value)
        return out
    if isinstance(obj, (list, tuple)):
        return [to_value(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return [to_value(v) for v in sorted(obj, key=repr)]
    if isinstance(obj, (dt.datetime, dt.date, dt.time)):
        return obj.isoformat()
    if isinstance(obj, (uuid.UUID, Decimal)):
        return str(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_value(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    model_dump = getattr(obj, "model_dump", None)
    if callable(model_dump):
        return to_value(model_dump(mode="json"))
    raise _error("unsupported_value_type", f"cannot convert a {type(obj).__name__} to a Value")


@lru_cache(maxsize=512)
def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


# Hints whose exactly-typed values convert to themselves (see _from_class): the common
# case of every signal and activity argument, answered before the general dispatch.
_AS_IS = frozenset({int, float, str, bytes, bool, list, dict})


def from_value(value: Any, hint: Any) -> Any:
    """Convert a plain value back into the type ``hint`` names."""
    if type(value) is hint and hint in _AS_IS:
        return value
    if hint is Any or hint is object or (hint is None and value is None):
        return value
    if hint is None or hint is type(None):
        if value is not None:
            raise _error("invalid_payload_framing", f"expected None, got {type(value).__name__}")
        return None
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return _from_union(value, typing.get_args(hint))
    if origin is typing.Annotated:
        return from_value(value, typing.get_args(hint)[0])
    if origin is typing.Literal:
        if value not in typing.get_args(hint):
            raise _error("invalid_payload_framing", f"{value!r} is not one of {hint}")
        return value
    if origin is not None:
        return _from_generic(value, origin, typing.get_args(hint))
    if not isinstance(hint, type):
        return value
    return _from_class(value, hint)


def _from_union(value: Any, arms: tuple[Any, ...]) -> Any:
    if value is None and type(None) in arms:
        return None
    errors = []
    for arm in arms:
        if arm is type(None):
            continue
        try:
            return from_value(value, arm)
        except (ConversionError, TypeError, ValueError) as exc:
            errors.append(str(exc))
    raise _error("invalid_payload_framing", f"no arm of the union fits: {'; '.join(errors)}")


def _from_generic(value: Any, origin: Any, args: tuple[Any, ...]) -> Any:
    if origin in (list, Sequence, typing.Sequence) or (origin is tuple and not args):
        _expect(value, list, origin)
        item = args[0] if args else Any
        items = [from_value(v, item) for v in value]
        return items if origin is not tuple else tuple(items)
    if origin is tuple:
        _expect(value, list, origin)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_value(v, args[0]) for v in value)
        if len(args) != len(value):
            raise _error("invalid_payload_framing", f"expected {len(args)} items, got {len(value)}")
        return tuple(from_value(v, a) for v, a in zip(value, args, strict=True))
    if origin in (set, frozenset):
        _expect(value, list, origin)
        return origin(from_value(v, args[0] if args else Any) for v in value)
    if origin in (dict, Mapping, typing.Mapping):
        _expect(value, dict, origin)
        key_hint, value_hint = args if args else (Any, Any)
        return {from_value(k, key_hint): from_value(v, value_hint) for k, v in value.items()}
    return from_value(value, origin)


def _expect(value: Any, kind: type, hint: Any) -> None:
    if not isinstance(value, kind):
        raise _error(
            "invalid_payload_framing",
            f"expected a {kind.__name__} for {hint}, got {type(value).__name__}",
        )


def _from_class(value: Any, cls: type) -> Any:
    if issubclass(cls, enum.Enum):
        try:
            return cls(value)
        except ValueError as exc:
            raise _error("invalid_payload_framing", str(exc)) from exc
    if cls is bool:
        _expect(value, bool, cls)
        return value
    if cls is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if cls in (int, float, str, bytes, list, dict):
        _expect(value, cls, cls)
        return value
    if cls is dt.datetime:
        _expect(value, str, cls)
        return dt.datetime.fromisoformat(value)
    if cls is dt.date:
        _expect(value, str, cls)
        return dt.date.fromisoformat(value)
    if cls is dt.time:
        _expect(value, str, cls)
        return dt.time.fromisoformat(value)
    if cls in (uuid.UUID, Decimal):
        _expect(value, str, cls)
        try:
            return cls(value)
        except Exception as exc:
            raise _error("invalid_payload_framing", f"bad {cls.__name__}: {value!r}") from exc
    if cls in (tuple, set, frozenset):
        _expect(value, list, cls)
        return cls(value)
    if dataclasses.is_dataclass(cls):
        _expect(value, dict, cls)
        hints = _type_hints(cls)
        kwargs = {
            f.name: from_value(value[f.name], hints.get(f.name, Any))
            for f in dataclasses.fields(cls)
            if f.name in value
        }
        return cls(**kwargs)
    model_validate = getattr(cls, "model_validate", None)
    if callable(model_validate):
        return model_validate(value)
    if isinstance(value, cls):
        return value
    raise _error("unsupported_value_type", f"cannot convert a Value to {cls.__name__}")


def encode(obj: object) -> bytes:
    """Convert and encode one value as a frame."""
    return payload.encode(to_value(obj))


def decode(data: bytes, hint: Any = Any) -> Any:
    """Decode a frame and convert it to ``hint``."""
    return from_value(payload.decode(data), hint)


def encode_args(args: Sequence[object]) -> bytes:
    """Encode an argument list as one array-valued frame."""
    return payload.encode([to_value(a) for a in args])


def decode_args(data: bytes, hints: Sequence[Any]) -> list[Any]:
    """Decode an array-valued frame into arguments typed by ``hints`` (extra ones plain)."""
    values = payload.decode(data) if data else []
    if not isinstance(values, list):
        raise _error("invalid_payload_framing", "an argument list must be an array Value")
    return [from_value(v, hints[i] if i < len(hints) else Any) for i, v in enumerate(values)]


def arg_and_result_hints(
    fn: Callable[..., Any], *, skip_self: bool = True
) -> tuple[tuple[Any, ...], Any]:
    """Hints of the positional parameters (after ``self`` unless ``skip_self`` is False),
    and of the return value."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        # Unresolvable forward references: values then travel in their plain form.
        hints = {}
    params = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if skip_self:
        params = params[1:]
    return tuple(hints.get(p.name, Any) for p in params), hints.get("return", Any)
