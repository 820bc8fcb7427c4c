"""Every domain error has exactly one status and survives the round trip over gRPC."""

from __future__ import annotations

import grpc
import pytest

from durable_rpc import errors
from durable_rpc._rpc_status import from_rpc_error, reason_of, to_status


def all_error_classes() -> list[type[errors.DurableRpcError]]:
    found = []
    for value in vars(errors).values():
        if (
            isinstance(value, type)
            and issubclass(value, errors.DurableRpcError)
            and value is not errors.DurableRpcError
        ):
            found.append(value)
    return found


def test_every_error_class_has_one_status_and_is_reconstructible() -> None:
    classes = all_error_classes()
    assert len(classes) >= 10
    for cls in classes:
        assert cls.reason in errors.STATUS_BY_REASON, f"{cls.__name__} has no status"
        assert errors.ERROR_BY_REASON[cls.reason] is cls, f"{cls.__name__} cannot be rebuilt"
    assert set(errors.STATUS_BY_REASON) == {cls.reason for cls in classes}


@pytest.mark.parametrize("cls", all_error_classes(), ids=lambda c: c.__name__)
async def test_error_round_trips_through_a_real_grpc_call(
    cls: type[errors.DurableRpcError],
) -> None:
    async def fail(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await context.abort_with_status(to_status(cls("it went wrong")))
        raise AssertionError("unreachable")

    handler = grpc.method_handlers_generic_handler(
        "t.T", {"Fail": grpc.unary_unary_rpc_method_handler(fail)}
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await channel.unary_unary("/t.T/Fail")(b"")
    finally:
        await server.stop(None)
    assert info.value.code() == errors.STATUS_BY_REASON[cls.reason]
    assert reason_of(info.value) == cls.reason
    rebuilt = from_rpc_error(info.value)
    assert type(rebuilt) is cls
    assert rebuilt.message == "it went wrong"
