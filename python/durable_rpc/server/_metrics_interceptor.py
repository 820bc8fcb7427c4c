"""RPC metrics: ``durable_rpc.rpc_duration`` (s) {method, code} for every unary call."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
from opentelemetry import metrics
from opentelemetry.util.types import Attributes

from durable_rpc.telemetry._common import SCOPE
from durable_rpc.telemetry._metrics import SECONDS_BUCKETS
from durable_rpc.telemetry._unary_interceptor import Handler, UnaryWrappingInterceptor


class MetricsServerInterceptor(UnaryWrappingInterceptor):
    """Records each unary-unary call's duration under its method (``package.Service/
    Method``, only methods the server has: an unknown one gets no handler and is not
    counted) and final status code name (``OK``, ``NOT_FOUND``, ...; ``CANCELLED`` when
    the caller went away). Placed outside the ErrorInterceptor, so the code is the one the
    caller sees. Streaming calls pass through unrecorded (their duration is the stream's).

    Long polls (PollWorkflowTask, PollActivityTask, PollQueryTask) last up to the poll
    timeout by design: read their durations apart from the rest.
    """

    def __init__(self, meter_provider: metrics.MeterProvider | None = None) -> None:
        super().__init__()
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        self._duration = meter.create_histogram(
            "durable_rpc.rpc_duration",
            unit="s",
            description="Duration of one RPC handled by the server, by method and status",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )

    def _wrap(self, inner: Handler, method: str) -> Handler:
        method = method.lstrip("/")
        record = self._duration.record
        # One label set per status code, built on first use (at most 17 a method).
        labels: dict[grpc.StatusCode, Attributes] = {}

        def finish(began: float, code: grpc.StatusCode) -> None:
            attributes = labels.get(code)
            if attributes is None:
                attributes = labels[code] = {"method": method, "code": code.name}
            record(time.perf_counter() - began, attributes)

        async def handle(request: Any, context: grpc.aio.ServicerContext) -> Any:
            began = time.perf_counter()
            try:
                response = await inner(request, context)
            except grpc.aio.AbortError:
                finish(began, context.code() or grpc.StatusCode.UNKNOWN)
                raise
            except asyncio.CancelledError:
                finish(began, grpc.StatusCode.CANCELLED)
                raise
            except Exception:
                finish(began, grpc.StatusCode.UNKNOWN)  # what grpc answers
                raise
            finish(began, context.code() or grpc.StatusCode.OK)
            return response

        return handle
