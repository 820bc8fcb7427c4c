"""An in-memory WorkerService stand-in: queues of tasks, a log of every call."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from durable_rpc import _protocol
from durable_rpc._rpc_status import status_message
from durable_rpc.errors import DurableRpcError
from durable_rpc.v1 import service_pb2

POLL_S = 0.02


class FakeWorkerService:
    def __init__(self) -> None:
        self.workflow_tasks: asyncio.Queue[service_pb2.PollWorkflowTaskResponse] = asyncio.Queue()
        self.activity_tasks: asyncio.Queue[service_pb2.PollActivityTaskResponse] = asyncio.Queue()
        self.query_tasks: asyncio.Queue[service_pb2.PollQueryTaskResponse] = asyncio.Queue()
        self.calls: dict[str, list[Any]] = defaultdict(list)
        # Errors to raise, per method, before answering normally.
        self.errors: dict[str, list[BaseException]] = defaultdict(list)
        self.heartbeat_answer: Callable[[Any], service_pb2.HeartbeatActivityTaskResponse] = (
            lambda _req: service_pb2.HeartbeatActivityTaskResponse()
        )

    def _enter(self, method: str, request: Any) -> None:
        self.calls[method].append(request)
        if self.errors[method]:
            raise self.errors[method].pop(0)

    async def RegisterWorker(self, request: Any) -> service_pb2.RegisterWorkerResponse:
        self._enter("RegisterWorker", request)
        response = service_pb2.RegisterWorkerResponse()
        response.heartbeat_interval.FromTimedelta(timedelta(milliseconds=50))
        return response

    async def GetServerInfo(self, request: Any) -> service_pb2.GetServerInfoResponse:
        self._enter("GetServerInfo", request)
        return service_pb2.GetServerInfoResponse(
            protocol_version=_protocol.PROTOCOL_VERSION,
            min_protocol_version=_protocol.MIN_PROTOCOL_VERSION,
            capabilities=_protocol.SERVER_CAPABILITIES,
        )

    async def WorkerHeartbeat(self, request: Any) -> service_pb2.WorkerHeartbeatResponse:
        self._enter("WorkerHeartbeat", request)
        return service_pb2.WorkerHeartbeatResponse()

    async def DeregisterWorker(self, request: Any) -> service_pb2.DeregisterWorkerResponse:
        self._enter("DeregisterWorker", request)
        return service_pb2.DeregisterWorkerResponse()

    async def PollWorkflowTask(self, request: Any) -> service_pb2.PollWorkflowTaskResponse:
        self._enter("PollWorkflowTask", request)
        try:
            return await asyncio.wait_for(self.workflow_tasks.get(), POLL_S)
        except TimeoutError:
            return service_pb2.PollWorkflowTaskResponse()

    async def PollActivityTask(self, request: Any) -> service_pb2.PollActivityTaskResponse:
        self._enter("PollActivityTask", request)
        try:
            return await asyncio.wait_for(self.activity_tasks.get(), POLL_S)
        except TimeoutError:
            return service_pb2.PollActivityTaskResponse()

    async def PollQueryTask(self, request: Any) -> service_pb2.PollQueryTaskResponse:
        self._enter("PollQueryTask", request)
        try:
            return await asyncio.wait_for(self.query_tasks.get(), POLL_S)
        except TimeoutError:
            return service_pb2.PollQueryTaskResponse()

    async def RespondQueryTask(self, request: Any) -> service_pb2.RespondQueryTaskResponse:
        self._enter("RespondQueryTask", request)
        return service_pb2.RespondQueryTaskResponse()

    async def CompleteWorkflowTask(
        self, request: Any, **_: Any
    ) -> service_pb2.CompleteWorkflowTaskResponse:
        self._enter("CompleteWorkflowTask", request)
        return service_pb2.CompleteWorkflowTaskResponse()

    async def FailWorkflowTask(
        self, request: Any, **_: Any
    ) -> service_pb2.FailWorkflowTaskResponse:
        self._enter("FailWorkflowTask", request)
        return service_pb2.FailWorkflowTaskResponse()

    async def HeartbeatActivityTask(
        self, request: Any
    ) -> service_pb2.HeartbeatActivityTaskResponse:
        self._enter("HeartbeatActivityTask", request)
        return self.heartbeat_answer(request)

    async def CompleteActivityTask(
        self, request: Any, **_: Any
    ) -> service_pb2.CompleteActivityTaskResponse:
        self._enter("CompleteActivityTask", request)
        return service_pb2.CompleteActivityTaskResponse()

    async def FailActivityTask(
        self, request: Any, **_: Any
    ) -> service_pb2.FailActivityTaskResponse:
        self._enter("FailActivityTask", request)
        return service_pb2.FailActivityTaskResponse()

    async def CompleteTasks(self, request: Any, **_: Any) -> service_pb2.CompleteTasksResponse:
        """Each item through its single-call method, errors answered per item (as the
        real server does)."""
        self.calls["CompleteTasks"].append(request)
        results = []
        for outcome in request.outcomes:
            kind = outcome.WhichOneof("outcome")
            method = {
                "complete_workflow_task": self.CompleteWorkflowTask,
                "fail_workflow_task": self.FailWorkflowTask,
                "complete_activity_task": self.CompleteActivityTask,
                "fail_activity_task": self.FailActivityTask,
            }[kind]
            try:
                response = await method(getattr(outcome, kind))
            except DurableRpcError as error:
                results.append(service_pb2.TaskOutcomeResult(error=status_message(error)))
            else:
                results.append(service_pb2.TaskOutcomeResult(**{kind: response}))
        return service_pb2.CompleteTasksResponse(results=results)


class FakeClient:
    def __init__(self) -> None:
        self.namespace = "default"
        self.worker_service: Any = FakeWorkerService()

    @property
    def service(self) -> FakeWorkerService:
        assert isinstance(self.worker_service, FakeWorkerService)
        return self.worker_service


async def eventually(condition: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)
