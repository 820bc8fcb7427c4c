"""The client: connects to a server and starts or finds workflow runs."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Literal

import grpc

from durable_rpc import converter
from durable_rpc._rpc_status import from_rpc_error
from durable_rpc.client._batch import Progress, run_batch
from durable_rpc.client._channel import ENV_API_KEY, TLSConfig, open_channel
from durable_rpc.client._counts import WorkflowCounts, counts_from_proto
from durable_rpc.client._handle import (
    UPDATE_POLL_S,
    WorkflowHandle,
    WorkflowInfo,
    WorkflowUpdateHandle,
    info_from_proto,
    update_stage,
)
from durable_rpc.client._payload_channel import (
    DEFAULT_INLINE_THRESHOLD,
    DEFAULT_MAX_EXTERNAL_PAYLOAD_BYTES,
    PayloadChannel,
)
from durable_rpc.client._refs import signal_name, update_ref, workflow_ref
from durable_rpc.client._schedules import ScheduleCalls
from durable_rpc.codec import PayloadCodec
from durable_rpc.errors import StoreUnavailableError, UpdateTimeoutError
from durable_rpc.search_attributes import memo_to_proto
from durable_rpc.search_attributes import to_proto as sa_to_proto
from durable_rpc.telemetry import TracingChannel
from durable_rpc.v1 import admin_service_pb2_grpc, payload_pb2, service_pb2, service_pb2_grpc

DEFAULT_ADDRESS = "127.0.0.1:7233"
#: Attempts of a call the server deduplicates by request id when it fails UNAVAILABLE (a
#: replica went away mid-call, the database is reconnecting), with doubling pauses.
DEDUPLICATED_CALL_ATTEMPTS = 5
DEDUPLICATED_CALL_BACKOFF_S = 0.05


def default_address() -> str:
    """``DURABLE_RPC_ADDRESS`` or 127.0.0.1:7233."""
    return os.environ.get("DURABLE_RPC_ADDRESS", DEFAULT_ADDRESS)


class Client(ScheduleCalls):
    """A connection to a durable-rpc server, bound to one namespace."""

    def __init__(self, channel: grpc.aio.Channel, namespace: str = "default") -> None:
        self.channel = channel
        self.namespace = namespace
        self.workflow_service = service_pb2_grpc.WorkflowServiceStub(channel)
        self.worker_service = service_pb2_grpc.WorkerServiceStub(channel)
        self.admin_service = admin_service_pb2_grpc.AdminServiceStub(channel)

    @classmethod
    async def connect(
        cls,
        address: str | None = None,
        *,
        namespace: str = "default",
        timeout: float = 10.0,
        api_key: str | None = None,
        tls: TLSConfig | None = None,
        payload_inline_threshold: int = DEFAULT_INLINE_THRESHOLD,
        max_external_payload_bytes: int = DEFAULT_MAX_EXTERNAL_PAYLOAD_BYTES,
        payload_codec: PayloadCodec | None = None,
    ) -> Client:
        """Connect to ``address`` (default: ``DURABLE_RPC_ADDRESS``) and wait until ready.

        ``api_key`` (default: ``DURABLE_RPC_API_KEY``) is sent with every call, for a
        server that requires authentication; ``tls`` (default: from the
        ``DURABLE_RPC_TLS_*`` variables, else plain text) encrypts the connection and,
        with a client certificate, authenticates it to a server that requires mTLS.

        Payload frames over ``payload_inline_threshold`` bytes (workflow and activity
        inputs and results, signals, updates, queries) are uploaded to the server's
        payload store and sent by SHA-256 reference; references in responses are
        downloaded and verified, at most ``max_external_payload_bytes`` per response
        (over it: ``PayloadTooLargeError``). The worker built on this client does the same.

        ``payload_codec`` (``durable_rpc.codec``: ``AesGcmCodec``, ``CompressionCodec``,
        ``CompositeCodec``) encodes every payload this client and a worker built on it
        send, before any upload, and decodes every payload they receive (docs/engine.md,
        "Payload codecs"); without one, payloads are the plain Avro frames.
        """
        # Traced by a channel wrapper: grpc client interceptors add tasks to every call.
        # Outermost, payloads: a call's uploads and downloads are traced and keyed too.
        channel = PayloadChannel(
            TracingChannel(
                open_channel(
                    address or default_address(),
                    tls=tls if tls is not None else TLSConfig.from_env(),
                    api_key=api_key if api_key is not None else os.environ.get(ENV_API_KEY),
                    options=[
                        ("grpc.max_receive_message_length", 64 * 1024 * 1024),
                        ("grpc.keepalive_time_ms", 30_000),
                    ],
                )
            ),
            namespace,
            inline_threshold=payload_inline_threshold,
            max_external_payload_bytes=max_external_payload_bytes,
            codec=payload_codec,
        )
        try:
            if timeout is None:
                await channel.channel_ready()
            else:
                await _ready(channel, address or default_address(), timeout)
        except BaseException:
            await channel.close()
            raise
        return cls(channel, namespace)

    def for_namespace(self, namespace: str) -> Client:
        """A client of ``namespace`` on this client's connection (no new connection;
        closing either client closes the connection of both)."""
        channel = self.channel
        if isinstance(channel, PayloadChannel):
            channel = PayloadChannel(
                channel.channel,
                namespace,
                inline_threshold=channel.inline_threshold,
                max_external_payload_bytes=channel.max_external_payload_bytes,
                codec=channel.codec,
            )
        return Client(channel, namespace)

    async def close(self) -> None:
        await self.channel.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def call(self, method: Callable[..., Any], request: Any, **kwargs: Any) -> Any:
        """Call a stub method; failures become the matching domain error."""
        try:
            return await method(request, **kwargs)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    async def call_deduplicated(
        self, method: Callable[..., Any], request: Any, timeout: float | None = None
    ) -> Any:
        """Call a method the server deduplicates by the request's ``request_id`` (or
        update id): UNAVAILABLE is retried with the same request (at most
        ``DEDUPLICATED_CALL_ATTEMPTS`` times), so an attempt that did reach the database is
        answered by the retry, never repeated."""
        for attempt in range(DEDUPLICATED_CALL_ATTEMPTS):
            try:
                return await self.call(method, request, timeout=timeout)
            except StoreUnavailableError:
                if attempt == DEDUPLICATED_CALL_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(DEDUPLICATED_CALL_BACKOFF_S * 2**attempt)
        raise AssertionError("unreachable")

    async def start_workflow(
        self,
        workflow: Callable[..., Any] | str,
        *args: Any,
        id: str,
        task_queue: str,
        request_id: str | None = None,
        version: str | None = None,
        result_type: Any = None,
        memo: Mapping[str, Any] | None = None,
        search_attributes: Mapping[str, Any] | None = None,
        execution_timeout: timedelta | None = None,
        run_timeout: timedelta | None = None,
        priority: int | None = None,
        fairness_key: str | None = None,
        concurrency_key: str | None = None,
    ) -> WorkflowHandle:
        """Start a run of ``workflow`` (``Wf.run`` or a type name) with ``args``.

        Idempotent by ``request_id``: repeating it returns the same run. An open run with
        the same ``id`` started by another request raises WorkflowAlreadyStartedError.
        UNAVAILABLE is retried with the same request id (``call_deduplicated``).

        ``priority`` (1 most urgent .. 5, default 3) orders the claims of the run's
        workflow and activity tasks; ``fairness_key`` (e.g. a tenant) shares a priority
        fairly among keys (docs/engine.md, "Priority and fairness").
        ``concurrency_key`` (e.g. ``"customer-42"``): the namespace's admission policy may
        limit the open runs of one key (queue, cancel the newest or the oldest).
        """
        workflow_type, defn_version, hint = workflow_ref(workflow)
        request = service_pb2.StartWorkflowRequest(
            namespace=self.namespace,
            workflow_id=id,
            workflow_type=workflow_type,
            workflow_version=version or defn_version,
            task_queue=task_queue,
            input=payload_pb2.Payload(data=converter.encode_args(args)),
            request_id=request_id or uuid.uuid4().hex,
            concurrency_key=concurrency_key or "",
        )
        _start_options(
            request, memo, search_attributes, execution_timeout, run_timeout, priority, fairness_key
        )
        response = await self.call_deduplicated(self.workflow_service.StartWorkflow, request)
        return WorkflowHandle(
            self, id, response.run_id, result_type if result_type is not None else hint
        )

    async def signal_with_start_workflow(
        self,
        workflow: Callable[..., Any] | str,
        *args: Any,
        id: str,
        task_queue: str,
        signal: Callable[..., Any] | str,
        signal_args: Sequence[Any] = (),
        request_id: str | None = None,
        version: str | None = None,
        result_type: Any = None,
        memo: Mapping[str, Any] | None = None,
        search_attributes: Mapping[str, Any] | None = None,
        execution_timeout: timedelta | None = None,
        run_timeout: timedelta | None = None,
        priority: int | None = None,
        fairness_key: str | None = None,
    ) -> WorkflowHandle:
        """Signal the open run of ``id``, or start ``workflow(*args)`` and signal it: one
        atomic call, so "create the order if new, then add the item" never races.

        A started run sees the signal in its first activation, before its main method
        runs. ``request_id`` makes retries safe: a repeat delivers nothing new.
        """
        workflow_type, defn_version, hint = workflow_ref(workflow)
        request = service_pb2.SignalWithStartWorkflowRequest(
            namespace=self.namespace,
            workflow_id=id,
            workflow_type=workflow_type,
            workflow_version=version or defn_version,
            task_queue=task_queue,
            input=payload_pb2.Payload(data=converter.encode_args(args)),
            signal_name=signal_name(signal),
            signal_input=payload_pb2.Payload(data=converter.encode_args(list(signal_args))),
            request_id=request_id or uuid.uuid4().hex,
        )
        _start_options(
            request, memo, search_attributes, execution_timeout, run_timeout, priority, fairness_key
        )
        response = await self.call_deduplicated(
            self.workflow_service.SignalWithStartWorkflow, request
        )
        return WorkflowHandle(
            self, id, response.run_id, result_type if result_type is not None else hint
        )

    async def start_update_with_start(
        self,
        workflow: Callable[..., Any] | str,
        *args: Any,
        id: str,
        task_queue: str,
        update: Callable[..., Any] | str,
        update_args: Sequence[Any] = (),
        update_id: str | None = None,
        wait_for: Literal["accepted", "completed"] = "accepted",
        timeout: float | None = None,
        version: str | None = None,
        result_type: Any = None,
        update_result_type: Any = None,
        memo: Mapping[str, Any] | None = None,
        search_attributes: Mapping[str, Any] | None = None,
        execution_timeout: timedelta | None = None,
        run_timeout: timedelta | None = None,
    ) -> WorkflowUpdateHandle:
        """Send an update to the open run of ``id``, or start ``workflow(*args)`` and send
        it to the new run: one atomic call, so "create the order if new, then change it and
        answer" never races. Waits until the update reaches ``wait_for`` (raises like
        ``WorkflowHandle.start_update``); the handle's ``workflow_handle`` is the run's.

        ``update_id`` makes retries safe: a repeat finds the same run and the same update,
        whose handler runs once. A started run sees the update in its first activation.
        """
        stage = update_stage(wait_for)
        workflow_type, defn_version, hint = workflow_ref(workflow)
        name, update_hint = update_ref(update)
        update_input = converter.encode_args(list(update_args))
        request = service_pb2.UpdateWithStartWorkflowRequest(
            namespace=self.namespace,
            workflow_id=id,
            workflow_type=workflow_type,
            workflow_version=version or defn_version,
            task_queue=task_queue,
            input=payload_pb2.Payload(data=converter.encode_args(args)),
            update_name=name,
            update_input=payload_pb2.Payload(data=update_input),
            update_id=update_id or uuid.uuid4().hex,
            wait_for=stage,
        )
        _start_options(request, memo, search_attributes, execution_timeout, run_timeout)
        wait = UPDATE_POLL_S if timeout is None else timeout
        request.timeout.FromMilliseconds(int(wait * 1000))
        while True:
            try:
                response: service_pb2.UpdateWithStartWorkflowResponse = (
                    await self.call_deduplicated(
                        self.workflow_service.UpdateWithStartWorkflow, request, timeout=wait + 30
                    )
                )
                break
            except UpdateTimeoutError:
                # The start and the request are recorded: asking again (same update id)
                # only waits again.
                if timeout is not None:
                    raise
        handle = WorkflowHandle(
            self, id, response.update.run_id, result_type if result_type is not None else hint
        )
        return WorkflowUpdateHandle.answered(
            handle,
            request.update_id,
            name,
            update_input,
            update_result_type if update_result_type is not None else update_hint,
            response.update,
        )

    async def execute_update_with_start(
        self,
        workflow: Callable[..., Any] | str,
        *args: Any,
        id: str,
        task_queue: str,
        update: Callable[..., Any] | str,
        update_args: Sequence[Any] = (),
        update_id: str | None = None,
        timeout: float | None = None,
        version: str | None = None,
        update_result_type: Any = None,
        memo: Mapping[str, Any] | None = None,
        search_attributes: Mapping[str, Any] | None = None,
        execution_timeout: timedelta | None = None,
        run_timeout: timedelta | None = None,
    ) -> Any:
        """``start_update_with_start`` waiting for the update's handler to finish; returns
        its result (raises WorkflowUpdateFailedError when it raised)."""
        handle = await self.start_update_with_start(
            workflow,
            *args,
            id=id,
            task_queue=task_queue,
            update=update,
            update_args=update_args,
            update_id=update_id,
            wait_for="completed",
            timeout=timeout,
            version=version,
            update_result_type=update_result_type,
            memo=memo,
            search_attributes=search_attributes,
            execution_timeout=execution_timeout,
            run_timeout=run_timeout,
        )
        return await handle.result(timeout=timeout)

    def get_handle(
        self, workflow_id: str, run_id: str | None = None, *, result_type: Any = Any
    ) -> WorkflowHandle:
        """A handle on an existing run (the latest run of the id when run_id is None)."""
        return WorkflowHandle(self, workflow_id, run_id, result_type)

    async def list_workflows(
        self,
        query: str = "",
        *,
        status: int = 0,
        workflow_type: str = "",
        page_size: int = 100,
    ) -> AsyncIterator[WorkflowInfo]:
        """Every matching run, newest first, fetched page by page. ``query`` filters in
        the list query language, e.g. ``'WorkflowType = "Order" AND Amount > 100'``
        (docs/engine.md)."""
        token = b""
        while True:
            request = service_pb2.ListWorkflowsRequest(
                namespace=self.namespace,
                status=status,  # type: ignore[arg-type]
                workflow_type=workflow_type,
                page_size=page_size,
                next_page_token=token,
                query=query,
            )
            response = await self.call(self.workflow_service.ListWorkflows, request)
            for info in response.workflows:
                yield info_from_proto(info)
            token = response.next_page_token
            if not token:
                return

    async def count_workflows(
        self, query: str = "", *, status: int = 0, workflow_type: str = ""
    ) -> WorkflowCounts:
        """The runs ``list_workflows`` with the same filter would yield, counted by
        status in one call (exact for any number of runs; nothing is listed)."""
        request = service_pb2.CountWorkflowsRequest(
            namespace=self.namespace,
            status=status,  # type: ignore[arg-type]
            workflow_type=workflow_type,
            query=query,
        )
        return counts_from_proto(await self.call(self.workflow_service.CountWorkflows, request))

    async def batch_cancel(
        self,
        query: str,
        *,
        reason: str = "",
        cleanup_timeout: timedelta | None = None,
        batch_id: str | None = None,
        max_per_second: int = 0,
        on_progress: Callable[[Progress], None] | None = None,
    ) -> Progress:
        """Ask every open run matching ``query`` (the list query language) to cancel, at
        most ``max_per_second`` runs a second (0: the server's default, 50). Returns the
        final counts; ``on_progress`` sees each progress message. ``cleanup_timeout``
        bounds each run's cleanup as in :meth:`WorkflowHandle.cancel`."""
        request = self._batch_request(query, batch_id, max_per_second)
        request.cancel_reason = reason
        if cleanup_timeout is not None:
            request.cleanup_timeout.FromTimedelta(cleanup_timeout)
        return await run_batch(self, request, on_progress)

    async def batch_terminate(
        self,
        query: str,
        *,
        reason: str = "",
        batch_id: str | None = None,
        max_per_second: int = 0,
        on_progress: Callable[[Progress], None] | None = None,
    ) -> Progress:
        """Terminate every open run matching ``query`` (see :meth:`batch_cancel`)."""
        request = self._batch_request(query, batch_id, max_per_second)
        request.terminate_reason = reason
        return await run_batch(self, request, on_progress)

    async def batch_signal(
        self,
        query: str,
        signal: Callable[..., Any] | str,
        *args: Any,
        batch_id: str | None = None,
        max_per_second: int = 0,
        on_progress: Callable[[Progress], None] | None = None,
    ) -> Progress:
        """Signal every open run matching ``query`` (see :meth:`batch_cancel`). Re-running
        with the same ``batch_id`` delivers nothing twice."""
        request = self._batch_request(query, batch_id, max_per_second)
        request.signal.signal_name = signal_name(signal)
        request.signal.input.data = converter.encode_args(args)
        return await run_batch(self, request, on_progress)

    def _batch_request(
        self, query: str, batch_id: str | None, max_per_second: int
    ) -> service_pb2.BatchWorkflowsRequest:
        return service_pb2.BatchWorkflowsRequest(
            namespace=self.namespace,
            query=query,
            batch_id=batch_id or uuid.uuid4().hex,
            max_per_second=max_per_second,
        )


def _start_options(
    request: (
        service_pb2.StartWorkflowRequest
        | service_pb2.SignalWithStartWorkflowRequest
        | service_pb2.UpdateWithStartWorkflowRequest
    ),
    memo: Mapping[str, Any] | None,
    search_attributes: Mapping[str, Any] | None,
    execution_timeout: timedelta | None,
    run_timeout: timedelta | None,
    priority: int | None = None,
    fairness_key: str | None = None,
) -> None:
    if memo:
        request.memo.CopyFrom(memo_to_proto(memo))
    if search_attributes:
        request.search_attributes.CopyFrom(sa_to_proto(search_attributes))
    if execution_timeout is not None:
        request.execution_timeout.FromTimedelta(execution_timeout)
    if run_timeout is not None:
        request.run_timeout.FromTimedelta(run_timeout)
    if priority is not None:
        request.priority = priority  # the server checks the range (INVALID_PRIORITY)
    if fairness_key:
        request.fairness_key = fairness_key


async def _ready(channel: grpc.aio.Channel, address: str, timeout: float) -> None:
    try:
        await asyncio.wait_for(channel.channel_ready(), timeout)
    except TimeoutError as exc:
        raise StoreUnavailableError(
            f"no durable-rpc server answered at {address} within {timeout}s "
            "(is it running? check the address: --address or DURABLE_RPC_ADDRESS)"
        ) from exc
