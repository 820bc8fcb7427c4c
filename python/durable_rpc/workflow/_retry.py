"""``RetryPolicy``: how failed activity attempts are retried."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from google.protobuf import duration_pb2

from durable_rpc.v1 import options_pb2


def duration(value: timedelta | float) -> duration_pb2.Duration:
    """A protobuf Duration from a timedelta or a number of seconds."""
    out = duration_pb2.Duration()
    out.FromTimedelta(value if isinstance(value, timedelta) else timedelta(seconds=value))
    return out


@dataclass(frozen=True)
class RetryPolicy:
    """Retry schedule of an activity. ``None`` fields take the server defaults
    (1s initial interval, coefficient 2.0, maximum 100 x initial); ``maximum_attempts``
    0 means unlimited. ``non_retryable_error_types`` lists Failure types never retried."""

    initial_interval: timedelta | None = None
    backoff_coefficient: float | None = None
    maximum_interval: timedelta | None = None
    maximum_attempts: int = 0
    non_retryable_error_types: Sequence[str] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.initial_interval is not None and self.initial_interval <= timedelta(0):
            raise ValueError("initial_interval must be positive")
        if self.backoff_coefficient is not None and self.backoff_coefficient < 1.0:
            raise ValueError("backoff_coefficient must be at least 1.0")
        if (
            self.maximum_interval is not None
            and self.initial_interval is not None
            and self.maximum_interval < self.initial_interval
        ):
            raise ValueError("maximum_interval must not be below initial_interval")
        if self.maximum_attempts < 0:
            raise ValueError("maximum_attempts must be >= 0 (0 = unlimited)")

    def to_proto(self) -> options_pb2.RetryPolicy:
        out = options_pb2.RetryPolicy(
            maximum_attempts=self.maximum_attempts,
            non_retryable_error_types=list(self.non_retryable_error_types),
        )
        if self.initial_interval is not None:
            out.initial_interval.CopyFrom(duration(self.initial_interval))
        if self.backoff_coefficient is not None:
            out.backoff_coefficient = self.backoff_coefficient
        if self.maximum_interval is not None:
            out.maximum_interval.CopyFrom(duration(self.maximum_interval))
        return out
