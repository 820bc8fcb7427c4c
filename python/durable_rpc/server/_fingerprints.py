"""A registered definition's fingerprint algorithms, checked (RegisterWorker)."""

from __future__ import annotations

from durable_rpc.errors import InvalidArgumentError
from durable_rpc.server import _validate
from durable_rpc.store import CodeFingerprints
from durable_rpc.v1 import service_pb2


def code_fingerprints(definition: service_pb2.WorkflowDefinition) -> CodeFingerprints:
    """What the worker says about the definition's fingerprint beyond its value: the
    algorithm that made it and the same code's fingerprints under earlier algorithms,
    at most one per algorithm (two would say two different things of one code)."""
    legacy: dict[str, str] = {}
    for item in definition.legacy_fingerprints:
        algorithm = _validate.name("workflows.legacy_fingerprints.algorithm", item.algorithm)
        if algorithm in legacy:
            raise InvalidArgumentError(
                f"workflows.legacy_fingerprints names algorithm {algorithm!r} twice "
                f"for {definition.name!r}"
            )
        legacy[algorithm] = _validate.name("workflows.legacy_fingerprints.value", item.value)
    algorithm = _validate.name(
        "workflows.fingerprint_algorithm", definition.fingerprint_algorithm, required=False
    )
    return CodeFingerprints(algorithm=algorithm, legacy=legacy)
