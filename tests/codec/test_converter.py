"""Typed round trips through the converter layer."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import uuid
from decimal import Decimal
from typing import Any

import pydantic
import pytest

from durable_rpc import converter, payload


class Tier(enum.Enum):
    GOLD = "gold"
    SILVER = "silver"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclasses.dataclass(frozen=True)
class Line:
    sku: str
    qty: int
    price: Decimal


@dataclasses.dataclass
class Order:
    id: uuid.UUID
    placed_at: dt.datetime
    ship_on: dt.date
    tier: Tier
    priority: Priority
    lines: list[Line]
    tags: set[str]
    dims: tuple[int, int, int]
    note: str | None = None
    extra: dict[str, float] = dataclasses.field(default_factory=dict)


class Customer(pydantic.BaseModel):
    name: str
    since: dt.date
    vip: bool = False


def make_order() -> Order:
    return Order(
        id=uuid.UUID("12345678-1234-5678-1234-567812345678"),
        placed_at=dt.datetime(2026, 11, 29, 12, 30, tzinfo=dt.UTC),
        ship_on=dt.date(2026, 12, 1),
        tier=Tier.GOLD,
        priority=Priority.HIGH,
        lines=[Line("A-1", 2, Decimal("9.99")), Line("B-2", 1, Decimal("100.00"))],
        tags={"gift", "express"},
        dims=(10, 20, 30),
        extra={"weight": 1.5},
    )


def test_dataclass_round_trip_gives_back_the_typed_value() -> None:
    order = make_order()
    frame = converter.encode(order)
    assert converter.decode(frame, Order) == order


def test_plain_form_is_what_other_languages_see() -> None:
    plain = payload.decode(converter.encode(make_order()))
    assert plain["id"] == "12345678-1234-5678-1234-567812345678"
    assert plain["placed_at"] == "2026-11-29T12:30:00+00:00"
    assert plain["tier"] == "gold" and plain["priority"] == 2
    assert plain["lines"][0] == {"sku": "A-1", "qty": 2, "price": "9.99"}
    assert sorted(plain["tags"]) == ["express", "gift"]


def test_pydantic_model_round_trip() -> None:
    customer = Customer(name="Ada", since=dt.date(2020, 1, 2), vip=True)
    assert converter.decode(converter.encode(customer), Customer) == customer


def test_argument_lists_are_one_array_frame() -> None:
    frame = converter.encode_args([make_order(), 3, None])
    assert isinstance(payload.decode(frame), list)
    order, count, nothing = converter.decode_args(frame, [Order, int, Any])
    assert order == make_order() and count == 3 and nothing is None


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        ("not-a-uuid", uuid.UUID),
        ("bronze", Tier),
        ([1, 2], tuple[int, int, int]),
        ("x", int),
        (1, bool),
    ],
)
def test_values_that_do_not_fit_the_hint_are_rejected(value: Any, hint: Any) -> None:
    with pytest.raises(converter.ConversionError):
        converter.from_value(value, hint)


def test_unsupported_types_are_rejected_on_encode() -> None:
    with pytest.raises(converter.ConversionError) as info:
        converter.encode(object())
    assert info.value.reason == "unsupported_value_type"


def test_optional_and_int_to_float() -> None:
    assert converter.from_value(None, int | None) is None
    assert converter.from_value(3, float) == 3.0
    assert isinstance(converter.from_value(3, float), float)
