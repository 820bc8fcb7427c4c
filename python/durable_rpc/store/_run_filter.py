"""The WHERE clause of ``list_runs`` and ``count_runs``: one filter, so a count always
counts exactly the runs the list with the same arguments would page through."""

from __future__ import annotations

from durable_rpc.errors import InvalidArgumentError
from durable_rpc.store._records import RUN_STATUSES
from durable_rpc.store._search import compile_query


def run_filter(
    namespace: str,
    status: str | None,
    workflow_type: str | None,
    started_after_ms: int | None,
    started_before_ms: int | None,
    query: str | None,
) -> tuple[list[str], list[object]]:
    """(conditions on ``runs``, AND-ed; their parameters). Raises InvalidArgumentError for
    an unknown status or a malformed query (``_search.compile_query``'s message)."""
    if status and status not in RUN_STATUSES:
        raise InvalidArgumentError(f"unknown status {status!r}")
    where = ["namespace = ?"]
    params: list[object] = [namespace]
    if status:
        where.append("status = ?")
        params.append(status)
    if workflow_type:
        where.append("workflow_type = ?")
        params.append(workflow_type)
    if started_after_ms is not None:
        where.append("start_time_ms >= ?")
        params.append(started_after_ms)
    if started_before_ms is not None:
        where.append("start_time_ms < ?")
        params.append(started_before_ms)
    if query:
        conditions, values = compile_query(query)
        where.extend(conditions)
        params.extend(values)
    return where, params
