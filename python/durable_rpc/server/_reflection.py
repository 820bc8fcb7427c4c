"""Server reflection as both grpc.reflection.v1 and grpc.reflection.v1alpha.

Current grpcurl and other tools ask for v1 first; grpcio-reflection (1.81) serves only
v1alpha. v1 is the same protocol renamed (reflection.proto moved package, every message
and field unchanged), so v1 is served by the same servicer under the v1 name, and its
file descriptor (v1alpha's, renamed) is added to the pool so tools can describe it too.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

V1_SERVICE_NAME = "grpc.reflection.v1.ServerReflection"
_V1_FILE = "grpc/reflection/v1/reflection.proto"
_V1ALPHA_PACKAGE = reflection_pb2.DESCRIPTOR.package


def enable(server: grpc.aio.Server, service_names: Iterable[str]) -> None:
    """Serves reflection for ``service_names`` plus both reflection services."""
    _add_v1_descriptor()
    servicer = reflection.aio.ReflectionServicer(
        (*service_names, reflection.SERVICE_NAME, V1_SERVICE_NAME)
    )
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(V1_SERVICE_NAME, {"ServerReflectionInfo": handler}),)
    )


def _add_v1_descriptor() -> None:
    pool = descriptor_pool.Default()  # type: ignore[no-untyped-call]
    try:
        pool.FindFileByName(_V1_FILE)
        return  # added by an earlier server of this process
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name = _V1_FILE
    proto.package = "grpc.reflection.v1"
    proto.ClearField("options")
    old, new = f".{_V1ALPHA_PACKAGE}.", ".grpc.reflection.v1."
    for message in proto.message_type:
        for field in message.field:
            if field.type_name.startswith(old):
                field.type_name = new + field.type_name[len(old) :]
    for service in proto.service:
        for method in service.method:
            method.input_type = method.input_type.replace(old, new, 1)
            method.output_type = method.output_type.replace(old, new, 1)
    pool.AddSerializedFile(proto.SerializeToString())
