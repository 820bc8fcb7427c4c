"""SetNamespaceAdmission, GetNamespaceAdmission and RemoveNamespaceAdmission (flow
control): a namespace's limit of open runs and start rate, enforced by the store's
starts (``store/_admission.py``); namespace admin calls (``_auth``)."""

from __future__ import annotations

import grpc
from google.protobuf import duration_pb2

from durable_rpc.errors import InvalidArgumentError
from durable_rpc.server import _convert, _validate
from durable_rpc.store import Admission, Store
from durable_rpc.v1 import admin_service_pb2 as pb

#: AdmissionOverLimit by the store's policy names (unspecified: queue).
_OVER_LIMIT = {"queue": pb.ADMISSION_OVER_LIMIT_QUEUE, "refuse": pb.ADMISSION_OVER_LIMIT_REFUSE}
_OVER_LIMIT_NAME = {
    pb.ADMISSION_OVER_LIMIT_UNSPECIFIED: "queue",
    pb.ADMISSION_OVER_LIMIT_QUEUE: "queue",
    pb.ADMISSION_OVER_LIMIT_REFUSE: "refuse",
}


#: ConcurrencyKeyStrategy by the store's strategy names (unspecified: queue).
_KEY_STRATEGY = {
    "queue": pb.CONCURRENCY_KEY_STRATEGY_QUEUE,
    "cancel_newest": pb.CONCURRENCY_KEY_STRATEGY_CANCEL_NEWEST,
    "cancel_oldest": pb.CONCURRENCY_KEY_STRATEGY_CANCEL_OLDEST,
}
_KEY_STRATEGY_NAME = {
    pb.CONCURRENCY_KEY_STRATEGY_UNSPECIFIED: "queue",
    **{value: name for name, value in _KEY_STRATEGY.items()},
}


def admission_message(admission: Admission) -> pb.NamespaceAdmission:
    period = admission.period_ms or 0
    return pb.NamespaceAdmission(
        max_open_runs=admission.max_open_runs or 0,
        starts_per_period=admission.starts_per_period or 0,
        period=duration_pb2.Duration(seconds=period // 1000, nanos=period % 1000 * 1_000_000),
        over_limit=_OVER_LIMIT[admission.over_limit],
        open_runs=admission.open_runs,
        waiting_runs=admission.waiting_runs,
        update_time=_convert.timestamp(admission.updated_at_ms),
        max_open_runs_per_key=admission.max_per_key or 0,
        key_strategy=_KEY_STRATEGY[admission.key_strategy],
    )


def _period_ms(period: duration_pb2.Duration) -> int:
    if period.seconds < 0 or period.nanos < 0 or period.nanos % 1_000_000:
        raise InvalidArgumentError("period must be a positive whole number of ms")
    return period.seconds * 1000 + period.nanos // 1_000_000


class AdminAdmissionMixin:
    _store: Store

    async def SetNamespaceAdmission(
        self, request: pb.SetNamespaceAdmissionRequest, context: grpc.aio.ServicerContext
    ) -> pb.SetNamespaceAdmissionResponse:
        over_limit = _OVER_LIMIT_NAME.get(request.over_limit)
        if over_limit is None:
            raise InvalidArgumentError(f"unknown over_limit {request.over_limit}")
        key_strategy = _KEY_STRATEGY_NAME.get(request.key_strategy)
        if key_strategy is None:
            raise InvalidArgumentError(f"unknown key_strategy {request.key_strategy}")
        rate = request.starts_per_period
        period = _period_ms(request.period)
        # 0 (the fields' default) is "none"; negative values are the store's refusal.
        admission = await self._store.set_namespace_admission(
            _validate.namespace(request.namespace),
            request.max_open_runs or None,
            rate or None,
            period if rate or period else None,
            over_limit,
            request.max_open_runs_per_key or None,
            key_strategy,
        )
        return pb.SetNamespaceAdmissionResponse(admission=admission_message(admission))

    async def GetNamespaceAdmission(
        self, request: pb.GetNamespaceAdmissionRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetNamespaceAdmissionResponse:
        admission = await self._store.get_namespace_admission(
            _validate.namespace(request.namespace)
        )
        if admission is None:
            return pb.GetNamespaceAdmissionResponse()
        return pb.GetNamespaceAdmissionResponse(admission=admission_message(admission))

    async def RemoveNamespaceAdmission(
        self, request: pb.RemoveNamespaceAdmissionRequest, context: grpc.aio.ServicerContext
    ) -> pb.RemoveNamespaceAdmissionResponse:
        await self._store.remove_namespace_admission(_validate.namespace(request.namespace))
        return pb.RemoveNamespaceAdmissionResponse()
