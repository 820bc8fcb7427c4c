"""Memo, typed search attributes and the ListWorkflows query language.

Query language (``ListWorkflowsRequest.query``): comparisons joined by ``AND``::

    WorkflowType = "Order" AND Status = "running" AND CustomerId = "c-1"
    AND Amount > 100 AND StartTime > "2026-01-01T00:00:00Z"

- a comparison is ``Name OP literal``; OP is one of ``= != < <= > >=``;
- literals: ``"string"`` or ``'string'`` (backslash escapes the quote), integers,
  decimals (``1.5``, ``-2``), ``true`` / ``false``;
- built-in names: ``WorkflowId``, ``WorkflowType``, ``TaskQueue``, ``Status`` (a run
  status such as ``"running"``), ``StartTime`` and ``CloseTime`` (RFC 3339 strings);
- any other name is a search attribute. A string literal matches keyword and text
  attributes (and datetime ones when it parses as RFC 3339), a number matches int and
  double attributes, ``true``/``false`` bool attributes. A run without the attribute
  (or with one of another type) never matches, also not ``!=``;
- bounds: at most 32 KiB (UTF-8) and 20 comparisons (``MAX_QUERY_BYTES``,
  ``MAX_QUERY_TERMS``); past them the query is refused before it is parsed further, as
  INVALID_ARGUMENT with reason QUERY_TOO_LARGE or QUERY_TOO_COMPLEX. An integer literal
  must fit 64 bits.

Parsing is one linear pass on the caller's event loop; the bounds keep it to a few
milliseconds at most. Every value becomes a bound parameter: the SQL text only ever
holds names we wrote.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from durable_rpc.errors import InvalidArgumentError, QueryTooComplexError, QueryTooLargeError
from durable_rpc.store._logic import parse_payload
from durable_rpc.store._records import RUN_STATUSES
from durable_rpc.store._tx import Row, Tx
from durable_rpc.v1 import search_attributes_pb2

#: Type tag -> the SearchAttributeValue field that must hold the value.
TYPE_FIELDS: dict[str, str] = {
    "keyword": "string_value",
    "text": "string_value",
    "int": "int_value",
    "double": "double_value",
    "bool": "bool_value",
    "datetime": "datetime_value",
}
BUILTIN = {
    "WorkflowId": "workflow_id",
    "WorkflowType": "workflow_type",
    "TaskQueue": "task_queue",
    "Status": "status",
    "StartTime": "start_time_ms",
    "CloseTime": "close_time_ms",
}
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,127}")
MAX_ATTRIBUTES = 100
MAX_STRING = 2048

#: One stored attribute: (name, type, str_value, int_value, double_value).
SearchRow = tuple[str, str, str | None, int | None, float | None]


def parse_memo(data: bytes | None) -> bytes | None:
    """Validates a serialized Memo; returns it (None when empty)."""
    if not data:
        return None
    try:
        memo = search_attributes_pb2.Memo.FromString(data)
    except Exception as exc:
        raise InvalidArgumentError(f"memo is not a valid Memo message: {exc}") from exc
    for key, value in memo.fields.items():
        if not key:
            raise InvalidArgumentError("memo keys must not be empty")
        parse_payload(value.SerializeToString(), f"memo {key!r}")
    return data if memo.fields else None


def parse_search_attributes(data: bytes | None) -> list[SearchRow]:
    """Validates serialized SearchAttributes; returns the rows to store."""
    if not data:
        return []
    try:
        attrs = search_attributes_pb2.SearchAttributes.FromString(data)
    except Exception as exc:
        raise InvalidArgumentError(f"search_attributes is not valid: {exc}") from exc
    if len(attrs.indexed_fields) > MAX_ATTRIBUTES:
        raise InvalidArgumentError(f"at most {MAX_ATTRIBUTES} search attributes per run")
    rows: list[SearchRow] = []
    for name in sorted(attrs.indexed_fields):
        value = attrs.indexed_fields[name]
        if not NAME.fullmatch(name):
            raise InvalidArgumentError(f"search attribute name {name!r} must match {NAME.pattern}")
        if name in BUILTIN:
            raise InvalidArgumentError(f"search attribute name {name!r} is reserved")
        field = TYPE_FIELDS.get(value.type)
        if field is None:
            raise InvalidArgumentError(
                f"search attribute {name!r}: unknown type {value.type!r} "
                f"(expected one of {', '.join(TYPE_FIELDS)})"
            )
        which = value.WhichOneof("value")
        if which != field:
            raise InvalidArgumentError(
                f"search attribute {name!r} has type {value.type!r}, which needs "
                f"{field}, but {which or 'no value'} is set"
            )
        if value.type in ("keyword", "text"):
            if len(value.string_value) > MAX_STRING:
                raise InvalidArgumentError(
                    f"search attribute {name!r} is longer than {MAX_STRING} characters"
                )
            rows.append((name, value.type, value.string_value, None, None))
        elif value.type == "int":
            rows.append((name, "int", None, value.int_value, None))
        elif value.type == "bool":
            rows.append((name, "bool", None, int(value.bool_value), None))
        elif value.type == "double":
            if not math.isfinite(value.double_value):
                raise InvalidArgumentError(f"search attribute {name!r} must be finite")
            rows.append((name, "double", None, None, value.double_value))
        else:
            rows.append((name, "datetime", None, value.datetime_value.ToMilliseconds(), None))
    return rows


def write_search_attributes(tx: Tx, namespace: str, run_id: str, rows: Iterable[SearchRow]) -> None:
    """Adds or replaces the run's attributes named in ``rows``."""
    for name, type_, str_value, int_value, double_value in rows:
        tx.run(
            "INSERT INTO search_attributes (namespace, run_id, name, type, str_value, "
            "int_value, double_value) VALUES (?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (namespace, run_id, name) DO UPDATE SET type = excluded.type, "
            "str_value = excluded.str_value, int_value = excluded.int_value, "
            "double_value = excluded.double_value",
            (namespace, run_id, name, type_, str_value, int_value, double_value),
        )


def to_proto(rows: Iterable[Row]) -> search_attributes_pb2.SearchAttributes:
    attrs = search_attributes_pb2.SearchAttributes()
    for row in rows:
        value = attrs.indexed_fields[row["name"]]
        type_ = row["type"]
        value.type = type_
        if type_ in ("keyword", "text"):
            value.string_value = row["str_value"]
        elif type_ == "int":
            value.int_value = row["int_value"]
        elif type_ == "bool":
            value.bool_value = bool(row["int_value"])
        elif type_ == "double":
            value.double_value = float(row["double_value"])
        else:
            value.datetime_value.FromMilliseconds(row["int_value"])
    return attrs


def read_search_attributes(tx: Tx, namespace: str, run_ids: list[str]) -> dict[str, bytes]:
    """Serialized SearchAttributes of each run in ``run_ids`` that has any."""
    if not run_ids:
        return {}
    marks = ", ".join("?" for _ in run_ids)
    rows = tx.all(
        "SELECT run_id, name, type, str_value, int_value, double_value FROM search_attributes "
        f"WHERE namespace = ? AND run_id IN ({marks}) ORDER BY run_id, name",
        (namespace, *run_ids),
    )
    by_run: dict[str, list[Row]] = {}
    for row in rows:
        by_run.setdefault(row["run_id"], []).append(row)
    return {run_id: to_proto(rs).SerializeToString() for run_id, rs in by_run.items()}


# -- the query language ---------------------------------------------------------------------

#: Longest query accepted, in UTF-8 bytes: far past any filter a person writes, small
#: enough that parsing it (on the server's event loop) takes well under a millisecond.
MAX_QUERY_BYTES = 32 * 1024
#: Most comparisons one query may AND together. Each becomes one term of the SQL
#: ``WHERE``, a search attribute an ``EXISTS`` that PostgreSQL plans as one more
#: semi-join: planning grows much faster than the count (about 40 ms for 20, 0.5 s for
#: 50, seconds for 100), and SQLite refuses a depth past 1,000 outright.
MAX_QUERY_TERMS = 20

_NOT_SPACE = re.compile(r"\S")
_TOKEN = re.compile(
    r"""(?P<string>"[^"\\]*(?:\\.[^"\\]*)*"|'[^'\\]*(?:\\.[^'\\]*)*')
      | (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
      | (?P<op><=|>=|!=|=|<|>)
      | (?P<word>[A-Za-z_][A-Za-z0-9_.-]*)
    """,
    re.VERBOSE,
)
_ESCAPED = re.compile(r"\\(.)")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_OPS = {"=": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}

#: (kind, text, position in the query) of one token.
Token = tuple[str, str, int]


def _check_size(query: str) -> None:
    """Refuses a query past MAX_QUERY_BYTES before any parsing work: its length in
    characters bounds its UTF-8 size from below, so a huge one is not even encoded."""
    if len(query) > MAX_QUERY_BYTES:
        size = f"more than {MAX_QUERY_BYTES}"
    else:
        encoded = len(query.encode("utf-8", "surrogatepass"))
        if encoded <= MAX_QUERY_BYTES:
            return
        size = str(encoded)
    raise QueryTooLargeError(
        f"invalid query: {size} bytes long, at most {MAX_QUERY_BYTES} bytes are accepted"
    )


def _tokens(query: str) -> Iterator[Token]:
    """The query's tokens, read on demand: each regex match starts at its position in
    the query (no copy of the rest), so reading every token is linear in the length."""
    pos = 0
    while True:
        next_token = _NOT_SPACE.search(query, pos)
        if next_token is None:
            return
        pos = next_token.start()
        match = _TOKEN.match(query, pos)
        if match is None or match.lastgroup is None:
            raise InvalidArgumentError(
                f"invalid query: unexpected character {query[pos]!r} at position {pos}"
            )
        yield match.lastgroup, match.group(match.lastgroup), match.start(match.lastgroup)
        pos = match.end()


def _time_ms(text: str) -> int | None:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _literal(kind: str, text: str, where: int) -> Any:
    if kind == "string":
        # split() with the group keeps each escaped character and drops its backslash,
        # in one pass of the regex engine.
        return "".join(_ESCAPED.split(text[1:-1]))
    if kind == "number":
        if any(c in text for c in ".eE"):
            return float(text)  # an overflow is inf, refused where numbers are compared
        # The digit count first: int() of thousands of digits is refused by Python
        # itself, and anything past 19 digits cannot fit the 64-bit column anyway.
        if len(text.lstrip("-")) <= 19 and INT64_MIN <= (number := int(text)) <= INT64_MAX:
            return number
        raise InvalidArgumentError(
            f"invalid query: the integer at position {where} is outside the 64-bit range"
        )
    if kind == "word" and text.lower() in ("true", "false"):
        return text.lower() == "true"
    raise InvalidArgumentError(
        f"invalid query: expected a value (a quoted string, a number, true or false) at "
        f"position {where}, got {text!r}"
    )


def compile_query(query: str) -> tuple[list[str], list[object]]:
    """Parses ``query`` into SQL conditions on ``runs`` (AND-ed) and their parameters.

    A query longer than MAX_QUERY_BYTES is QUERY_TOO_LARGE (checked first), one with
    more than MAX_QUERY_TERMS comparisons QUERY_TOO_COMPLEX (when the parser reaches
    the one past the bound); both are INVALID_ARGUMENT."""
    _check_size(query)
    tokens = _tokens(query)
    token = next(tokens, None)
    where: list[str] = []
    params: list[object] = []
    terms = 0
    while token is not None:
        terms += 1
        if terms > MAX_QUERY_TERMS:
            raise QueryTooComplexError(
                f"invalid query: more than {MAX_QUERY_TERMS} comparisons; a query ANDs at "
                f"most {MAX_QUERY_TERMS} (narrow the filter, or split the work into "
                "several queries)"
            )
        op_token, value_token = next(tokens, None), next(tokens, None)
        if op_token is None or value_token is None:
            raise InvalidArgumentError("invalid query: incomplete comparison at the end")
        _comparison(token, op_token, value_token, where, params)
        token = next(tokens, None)
        if token is None:
            break
        kind, word, pos = token
        if kind != "word" or word.upper() != "AND":
            raise InvalidArgumentError(
                f"invalid query: expected AND at position {pos}, got {word!r} "
                "(only AND-ed comparisons are supported)"
            )
        token = next(tokens, None)
        if token is None:
            raise InvalidArgumentError("invalid query: AND at the end")
    return where, params


def _comparison(
    name_token: Token, op_token: Token, value_token: Token, where: list[str], params: list[object]
) -> None:
    k_name, name, p_name = name_token
    k_op, op, p_op = op_token
    k_val, val, p_val = value_token
    if k_name != "word" or name.upper() in ("AND", "OR", "NOT"):
        raise InvalidArgumentError(
            f"invalid query: expected an attribute name at position {p_name}, got {name!r}"
        )
    if k_op != "op":
        raise InvalidArgumentError(
            f"invalid query: expected one of = != < <= > >= at position {p_op}, got {op!r}"
        )
    _condition(name, _OPS[op], _literal(k_val, val, p_val), where, params)


def _condition(name: str, op: str, value: Any, where: list[str], params: list[object]) -> None:
    column = BUILTIN.get(name)
    if column is not None:
        if column.endswith("_ms"):
            ms = _time_ms(value) if isinstance(value, str) else None
            if ms is None:
                raise InvalidArgumentError(
                    f"invalid query: {name} needs an RFC 3339 time string such as "
                    f'"2026-01-01T00:00:00Z", got {value!r}'
                )
            where.append(f"{column} {op} ?")
            params.append(ms)
            return
        if not isinstance(value, str):
            raise InvalidArgumentError(f"invalid query: {name} needs a string, got {value!r}")
        if column == "status" and value not in RUN_STATUSES:
            raise InvalidArgumentError(
                f"invalid query: unknown status {value!r} "
                f"(one of {', '.join(sorted(RUN_STATUSES))})"
            )
        where.append(f"{column} {op} ?")
        params.append(value)
        return
    if not NAME.fullmatch(name):
        raise InvalidArgumentError(f"invalid query: bad attribute name {name!r}")
    if isinstance(value, bool):
        match = f"(sa.type = 'bool' AND sa.int_value {op} ?)"
        values: list[object] = [int(value)]
    elif isinstance(value, int | float):
        match = (
            f"((sa.type = 'int' AND sa.int_value {op} ?) "
            f"OR (sa.type = 'double' AND sa.double_value {op} ?))"
        )
        values = [value, float(value)]
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidArgumentError(f"invalid query: {value!r} is not a finite number")
    else:
        match = f"(sa.type IN ('keyword', 'text') AND sa.str_value {op} ?)"
        values = [value]
        ms = _time_ms(value)
        if ms is not None:
            match = f"({match} OR (sa.type = 'datetime' AND sa.int_value {op} ?))"
            values.append(ms)
    where.append(
        "EXISTS (SELECT 1 FROM search_attributes sa WHERE sa.namespace = runs.namespace "
        f"AND sa.run_id = runs.run_id AND sa.name = ? AND {match})"
    )
    params.extend([name, *values])
