"""Codec benchmark: durable-rpc's Rust Avro Value codec against fastavro and json.

Each codec does the whole job from a plain Python value to a Value frame and back:
fastavro needs the value wrapped into the schema's record form (and unwrapped after
reading) plus the single-object header; our codec and json take the plain value.
Single thread. Each figure is the median of --repeat rounds of about --seconds each.

    python bench/codec_bench.py [--json] [--seconds 0.5] [--repeat 5]
"""

from __future__ import annotations

import argparse
import io
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import fastavro

from durable_rpc import payload

NS = "durable_workflow.protocol."
SCALAR_BRANCH = {
    bool: (NS + "BooleanValue", "boolean"),
    int: (NS + "LongValue", "long"),
    float: (NS + "DoubleValue", "double"),
    bytes: (NS + "BytesValue", "bytes"),
    str: (NS + "StringValue", "string"),
}
HEADER = b"\xc3\x01" + payload.VALUE_SCHEMA_FINGERPRINT


def to_record(value: Any, hinted: bool) -> dict[str, Any]:
    """Plain value -> the Value record form fastavro writes (optionally with branch hints)."""
    if value is None:
        return {"value": None}
    if isinstance(value, list):
        inner: Any = {"items": [to_record(v, hinted) for v in value]}
        name = NS + "ArrayValue"
    elif isinstance(value, dict):
        inner = {"entries": {k: to_record(v, hinted) for k, v in value.items()}}
        name = NS + "MapValue"
    else:
        name, field = SCALAR_BRANCH[type(value)]
        inner = {field: value}
    return {"value": (name, inner) if hinted else inner}


def from_record(record: dict[str, Any]) -> Any:
    inner = record["value"]
    if inner is None:
        return None
    if "items" in inner:
        return [from_record(v) for v in inner["items"]]
    if "entries" in inner:
        return {k: from_record(v) for k, v in inner["entries"].items()}
    return next(iter(inner.values()))


WORDS = [
    *("order", "invoice", "shipment", "pending", "approved", "rejected", "warehouse"),
    *("alpha", "beta", "gamma", "delta", "customer", "parcel", "refund", "express"),
    *("ground", "priority", "region", "channel", "campaign"),
]


def order_document(rng: random.Random) -> dict[str, Any]:
    """An order-like event of about 160 nodes and 1.8 KB encoded."""

    def words(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))

    return {
        "id": rng.randrange(10**12),
        "type": "order.created",
        "version": 3,
        "created_at": 1764441600123,
        "customer": {
            "id": rng.randrange(10**9),
            "name": words(2),
            "email": "jane.doe@example.com",
            "vip": True,
            "score": rng.random() * 100,
            "address": {
                "street": "12 " + words(2),
                "city": "Springfield",
                "zip": "12345",
                "country": "US",
                "geo": [rng.uniform(-90, 90), rng.uniform(-180, 180)],
            },
        },
        "items": [
            {
                "sku": f"SKU-{rng.randrange(10**6):06d}",
                "name": words(3),
                "qty": rng.randrange(1, 10),
                "price": round(rng.uniform(1, 500), 2),
                "tags": [rng.choice(WORDS) for _ in range(3)],
                "attrs": {"color": rng.choice(WORDS), "size": rng.choice("SML")},
            }
            for _ in range(8)
        ],
        "total": round(rng.uniform(10, 5000), 2),
        "currency": "USD",
        "paid": False,
        "coupon": None,
        "notes": words(12),
        "flags": [True, False, True],
        "checksum": bytes(rng.randrange(256) for _ in range(32)),
        "metrics": {f"m{i}": rng.random() for i in range(6)},
        "history": [{"at": 1764441600000 + i, "state": rng.choice(WORDS)} for i in range(5)],
        "shipping": {"method": "ground", "eta_days": 4, "cost": 7.5, "tracking": None},
        "labels": {"region": "us-east", "channel": "web", "campaign": words(1)},
        "retries": 0,
        "ratio": 0.3333333333333333,
        "parent": None,
    }


def count_nodes(value: Any) -> int:
    if isinstance(value, list):
        return 1 + sum(count_nodes(v) for v in value)
    if isinstance(value, dict):
        return 1 + sum(count_nodes(v) for v in value.values())
    return 1


def jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    return value


def rate(fn: Callable[[], object], seconds: float, repeat: int) -> float:
    """Median calls per second over `repeat` rounds of about `seconds` each."""
    rounds = []
    for _ in range(repeat):
        calls = 0
        start = time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds and calls >= 3:
                break
        rounds.append(calls / elapsed)
    return statistics.median(rounds)


def measure(name: str, value: Any, seconds: float, repeat: int) -> dict[str, Any]:
    schema = fastavro.parse_schema(json.loads(payload.VALUE_SCHEMA_JSON))

    def fastavro_encode(hinted: bool) -> bytes:
        buf = io.BytesIO()
        buf.write(HEADER)
        fastavro.schemaless_writer(buf, schema, to_record(value, hinted))
        return buf.getvalue()

    frame = payload.encode(value)
    assert fastavro_encode(False) == frame == fastavro_encode(True), "codecs disagree"

    def fastavro_decode() -> Any:
        if frame[:10] != HEADER:
            raise ValueError("bad header")
        return from_record(fastavro.schemaless_reader(io.BytesIO(frame[10:]), schema, schema))

    assert fastavro_decode() == value == payload.decode(frame)
    plain = jsonable(value)
    text = json.dumps(plain)
    row: dict[str, Any] = {"payload": name, "nodes": count_nodes(value), "frame_bytes": len(frame)}
    timings = {
        "durable_rpc": (lambda: payload.encode(value), lambda: payload.decode(frame)),
        "fastavro": (lambda: fastavro_encode(False), fastavro_decode),
        "fastavro_hinted": (lambda: fastavro_encode(True), fastavro_decode),
        "json": (lambda: json.dumps(plain), lambda: json.loads(text)),
    }
    for codec, (enc, dec) in timings.items():
        row[f"{codec}_encode_per_s"] = rate(enc, seconds, repeat)
        row[f"{codec}_decode_per_s"] = rate(dec, seconds, repeat)
    for side in ("encode", "decode"):
        ours = row[f"durable_rpc_{side}_per_s"]
        row[f"{side}_x_fastavro"] = ours / row[f"fastavro_{side}_per_s"]
        row[f"{side}_x_json"] = ours / row[f"json_{side}_per_s"]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--seconds", type=float, default=0.5, help="seconds per round")
    parser.add_argument("--repeat", type=int, default=5, help="rounds per figure")
    args = parser.parse_args()

    rng = random.Random(7)
    small = order_document(rng)
    big = {"batch_id": 42, "records": [order_document(rng) for _ in range(112)]}
    ints = list(range(10_000))
    rows = [
        measure(name, value, args.seconds, args.repeat)
        for name, value in (("order_2kb", small), ("batch_200kb", big), ("ints_10k", ints))
    ]
    if args.json:
        json.dump({"benchmark": "codec", "results": rows}, sys.stdout, indent=2)
        print()
        return 0
    header = ("payload", "nodes", "bytes", "codec", "encode/s", "decode/s")
    print("{:<12} {:>6} {:>7}  {:<16} {:>10} {:>10}".format(*header))
    for row in rows:
        for codec in ("durable_rpc", "fastavro", "fastavro_hinted", "json"):
            print(
                f"{row['payload']:<12} {row['nodes']:>6} {row['frame_bytes']:>7}  {codec:<16} "
                f"{row[codec + '_encode_per_s']:>10,.0f} {row[codec + '_decode_per_s']:>10,.0f}"
            )
        print(
            f"{'':<28}ours vs fastavro: encode {row['encode_x_fastavro']:.1f}x, decode "
            f"{row['decode_x_fastavro']:.1f}x; vs json: encode {row['encode_x_json']:.2f}x, "
            f"decode {row['decode_x_json']:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
