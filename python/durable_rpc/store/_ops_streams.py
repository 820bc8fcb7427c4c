"""Message streams from clients: append, read a page, describe (``_streams``)."""

from __future__ import annotations

from collections.abc import Sequence

from durable_rpc.errors import WorkflowNotRunningError
from durable_rpc.store._history_limits import refuse_input
from durable_rpc.store._ops_base import _SqlOpsBase
from durable_rpc.store._shared import find_run
from durable_rpc.store._stream_limits import check_batch, check_dedup_id, check_page, check_stream
from durable_rpc.store._stream_records import StreamAppend, StreamDescription, StreamPage
from durable_rpc.store._streams import PAGE_BYTES, append_items, read_page
from durable_rpc.store._tx import Tx
from durable_rpc.v1 import payload_pb2


class _StreamOps(_SqlOpsBase):
    async def append_stream(
        self,
        namespace: str,
        workflow_id: str,
        run_id: str | None,
        stream: str,
        items: Sequence[tuple[str, payload_pb2.Payload]],
    ) -> StreamAppend:
        """Appends (dedup id, payload) items to a stream of the open run in one
        transaction; an item whose dedup id is in the stream already keeps its offset.
        WorkflowNotRunningError when the run is closed; StreamBatchTooLargeError past
        100 items; InvalidArgumentError for a bad name or dedup id."""
        check_stream(stream)
        check_batch(len(items), f"stream {stream!r}")
        for index, (dedup_id, _) in enumerate(items):
            check_dedup_id(dedup_id, index)

        def op(tx: Tx) -> StreamAppend:
            run = find_run(tx, namespace, workflow_id, run_id)  # locked: offsets follow on
            if run["status"] != "running":
                raise WorkflowNotRunningError(
                    f"run {run['run_id']} is {run['status']}: its streams take no more items"
                )
            now = tx.now_ms()
            offsets, appended = append_items(tx, namespace, run, stream, items, now)
            if appended:
                # The pages it may have recorded are input events, like a signal.
                refuse_input(
                    tx, self._options.history, namespace, run["run_id"], f"stream {stream!r}"
                )
            return StreamAppend(run["run_id"], offsets, appended, len(items) - appended)

        return await self._write(op)

    async def read_stream(
        self,
        namespace: str,
        workflow_id: str,
        run_id: str | None,
        stream: str,
        offset: int,
        limit: int,
    ) -> StreamPage:
        """One bounded page from ``offset`` (``limit`` 0: 100 items); a stream nothing
        was appended to gives an empty page."""
        check_stream(stream)
        size = check_page(offset, limit)

        def op(tx: Tx) -> StreamPage:
            run = find_run(tx, namespace, workflow_id, run_id)
            items, next_offset = read_page(
                tx, namespace, run["run_id"], stream, offset, size, PAGE_BYTES
            )
            return StreamPage(run["run_id"], items, next_offset, run["status"] == "running")

        return await self._read(op)

    async def describe_stream(
        self, namespace: str, workflow_id: str, run_id: str | None, stream: str
    ) -> StreamDescription:
        """The stream's length and whether its run is open."""
        check_stream(stream)

        def op(tx: Tx) -> StreamDescription:
            run = find_run(tx, namespace, workflow_id, run_id)
            row = tx.one(
                "SELECT count(*) AS length, max(appended_at_ms) AS last_ms FROM stream_items "
                "WHERE namespace = ? AND run_id = ? AND stream = ?",
                (namespace, run["run_id"], stream),
            )
            assert row is not None
            last = row["last_ms"]
            return StreamDescription(
                run["run_id"],
                stream,
                int(row["length"]),
                run["status"] == "running",
                None if last is None else int(last),
            )

        return await self._read(op)
