"""The native module ``durable_rpc._core``, built from ``rust_core/`` with PyO3.

Pure Rust logic behind thin adapters: the Avro Value codec, the replay machine and
lease bookkeeping. Import the public facades (:mod:`durable_rpc.payload`, ...) rather
than this module. It is built for the stable ABI (abi3, CPython 3.11 and later), so its
three exception classes are Python classes (``rust_core/src/py/errors.py``): a PyO3 class
cannot extend a built-in exception there.
"""

from typing import Any, final

__all__ = [
    "MAX_DEPTH",
    "VALUE_SCHEMA_FINGERPRINT",
    "VALUE_SCHEMA_JSON",
    "DueIndex",
    "LeaseBook",
    "MalformedHistoryError",
    "NondeterminismError",
    "PayloadError",
    "ReplayMachine",
    "decode",
    "encode",
    "replay_core_bench",
    "validate",
]

# --- Avro Value codec -------------------------------------------------------------

VALUE_SCHEMA_JSON: str
"""The Value schema (Avro JSON) shared with the Durable Workflow SDKs."""

VALUE_SCHEMA_FINGERPRINT: bytes
"""The schema's 8-byte CRC-64-AVRO fingerprint as written in frames (e2a33dff55802237)."""

MAX_DEPTH: int
"""Deepest nesting of lists and dicts accepted by encode and decode."""

class PayloadError(ValueError):
    """A value cannot be encoded, or a frame cannot be decoded.

    ``reason`` is stable: ``invalid_payload_framing``, ``unsupported_payload_schema``,
    ``non_finite_float``, ``integer_overflow``, ``invalid_map_key``,
    ``unsupported_value_type`` or ``nesting_too_deep``.
    """

    __slots__ = ("_message", "_reason")
    def __new__(cls, reason: str, message: str) -> PayloadError: ...
    @property
    def reason(self) -> str:
        """The stable reason code."""

    @property
    def message(self) -> str:
        """The human-readable explanation."""

def encode(value: object) -> bytes:
    """Encode None, bool, int (int64), finite float, bytes, bytearray, str, list or
    str-keyed dict as one single-object frame. Raises :class:`PayloadError`."""

def decode(data: bytes) -> Any:
    """Decode one frame into plain Python values. Raises :class:`PayloadError`."""

def validate(data: bytes) -> None:
    """Check that ``data`` is a well-formed frame without building any value.
    Raises :class:`PayloadError` with the same reasons as :func:`decode`."""

# --- Replay machine ---------------------------------------------------------------

class NondeterminismError(Exception):
    """Workflow code produced commands that differ from the recorded history.

    ``str()`` is ``"nondeterminism at seq 3: expected X, got Y"``. ``expected`` describes
    the recorded command (``nothing`` when the code produced an extra command) and
    ``actual`` the produced one (``nothing`` when the code no longer reaches a recorded
    command), e.g. ``ScheduleActivity(seq=2, type="charge")``,
    ``StartTimer(seq=3, duration=1.5s)``, ``CancelTimer(timer_seq=3)``,
    ``SideEffect(seq=4)``, ``Patch(id="charge-v2")``,
    ``CompleteWorkflow``, ``FailWorkflow``, ``CancelWorkflow``.
    """

    __slots__ = ("_actual", "_expected", "_seq")
    def __new__(cls, seq: int, expected: str, actual: str) -> NondeterminismError: ...
    @property
    def seq(self) -> int:
        """The workflow seq where the code diverged (the recorded event's seq when it has
        one, else the produced command's, else 0)."""

    @property
    def expected(self) -> str:
        """The recorded command, or ``nothing``."""

    @property
    def actual(self) -> str:
        """The produced command, or ``nothing``."""

class MalformedHistoryError(ValueError):
    """The history cannot be replayed: undecodable bytes, event ids not 1..N, event 1
    not ``workflow_started``, a command event not directly after a
    ``workflow_task_completed`` marker (or its other command events), or a marker whose
    ``last_seen_event_id`` is not in ``[1, marker id)`` or goes backwards."""

    __slots__ = ("_message",)
    def __new__(cls, message: str) -> MalformedHistoryError: ...
    @property
    def message(self) -> str:
        """What is wrong with the history."""

def replay_core_bench(history: bytes, iterations: int) -> tuple[int, float, float]:
    """Replays ``history`` (``History`` protobuf bytes) ``iterations`` times in Rust
    alone, each recorded workflow task completed with its own recorded commands (no
    workflow code). Returns (events replayed, seconds decoding, seconds replaying)."""

@final
class ReplayMachine:
    """Replays one run's history into activations and checks the produced commands.

    Call :meth:`next_activation` and :meth:`complete_activation` alternately until
    :meth:`next_activation` returns None, then :meth:`take_new_commands`. Each
    ``workflow_task_completed`` marker replays as one activation (``is_replaying``
    true, clock = the marker's ``workflow_time``) whose commands must match the command
    events recorded after the marker; undelivered input events after that form one
    final activation (clock = ``task_time_ms``) whose commands are all new.
    """

    def __new__(cls, history: bytes, task_time_ms: int) -> ReplayMachine:
        """``history``: ``durable_rpc.v1.History`` protobuf bytes; ``task_time_ms``: the
        current task's time (Unix ms). Raises :class:`MalformedHistoryError`."""

    def add_pending_update(self, job: bytes) -> None:
        """Adds an update request not in history yet (``DoUpdateJob`` protobuf bytes),
        delivered after the input jobs of the final, non-replayed activation."""

    def next_activation(self) -> bytes | None:
        """The next ``durable_rpc.v1.Activation`` (protobuf bytes), or None when replay is
        over. Raises RuntimeError while an activation is outstanding or after a
        :class:`NondeterminismError`."""

    def complete_activation(self, completion: bytes) -> None:
        """Hands back the ``durable_rpc.v1.ActivationCompletion`` (protobuf bytes) of the
        outstanding activation. Raises :class:`NondeterminismError` when a replayed
        activation's commands do not match history (the machine is then failed),
        ValueError for undecodable bytes or a command without a kind (the activation
        stays outstanding), RuntimeError when no activation is outstanding."""

    def take_new_commands(self) -> bytes:
        """An ``ActivationCompletion`` (protobuf bytes) holding only the new commands (those
        of the final activation). Drains them."""

    def continue_with(self, tail: bytes, task_time_ms: int, sent: bytes) -> str | None:
        """Continues a machine that delivered everything with ``tail`` (``History``
        protobuf bytes: the events after the known ones) for a new task at
        ``task_time_ms`` (sticky execution). ``sent``: the ``ActivationCompletion``
        (protobuf bytes) the last task was completed with. The tail's first workflow task
        must record exactly that decision (same events seen, same workflow time, same
        commands); it is not replayed again. Returns None when the machine continues, or
        why it cannot (the history diverged from it: replay from event 1). Raises
        :class:`MalformedHistoryError` for a tail that breaks the history contract."""

    @property
    def is_replaying(self) -> bool:
        """Whether the outstanding (or last) activation replays history; False before the
        first activation."""

    @property
    def run_id(self) -> str:
        """The run id from ``workflow_started``."""

# --- Lease bookkeeping ------------------------------------------------------------

@final
class LeaseBook:
    """The leases a worker holds, keyed by task id. Times are the worker's local
    monotonic clock in ms, passed in by the caller.

    A lease granted or renewed at ``t`` for ``lease_ms`` is due for a heartbeat from
    ``t + lease_ms * heartbeat_fraction`` and has lapsed locally from ``t + lease_ms``.
    """

    def __new__(cls, heartbeat_fraction: float = 0.5) -> LeaseBook:
        """Raises ValueError unless ``0 < heartbeat_fraction <= 0.5``."""

    @property
    def heartbeat_fraction(self) -> float:
        """The configured heartbeat fraction."""

    def track(self, task_id: str, token: int, lease_ms: int, now_ms: int) -> bool:
        """Record a claimed lease; replaces the held one unless that has a higher token.
        Returns whether it was recorded."""

    def renewed(self, task_id: str, token: int, lease_ms: int, now_ms: int) -> bool:
        """Record a successful heartbeat. Ignored (False) unless ``token`` is the held
        token: a stale renewal never revives a newer lease."""

    def release(self, task_id: str) -> bool:
        """Forget the task's lease. Returns whether it was held."""

    def token(self, task_id: str) -> int | None:
        """The fencing token held for the task, if any."""

    def due_for_heartbeat(self, now_ms: int) -> list[tuple[str, int]]:
        """``(task_id, token)`` of unexpired leases whose heartbeat is due, earliest
        first. Does not reset anything; :meth:`renewed` does."""

    def expired(self, now_ms: int) -> list[tuple[str, int]]:
        """``(task_id, token)`` of leases past ``granted + lease_ms``, earliest first: lapsed
        by the local clock (the worker's keeper asks the server, which decides)."""

    def next_deadline(self) -> int | None:
        """The earliest heartbeat-due time over held leases, or None."""

    def __len__(self) -> int: ...

@final
class DueIndex:
    """Due times (database-clock ms) keyed by string: timers, retry backoffs, lease
    expiries. O(log n) per operation; equal due times pop in key order."""

    def __new__(cls) -> DueIndex: ...
    def schedule(self, key: str, due_ms: int) -> None:
        """Schedule ``key`` at ``due_ms``, replacing its previous due time."""

    def cancel(self, key: str) -> bool:
        """Remove ``key``. Returns whether it was scheduled."""

    def pop_due(self, now_ms: int) -> list[str]:
        """Remove and return the keys due at or before ``now_ms``, in due order."""

    def next_due(self) -> int | None:
        """The earliest due time, or None."""

    def due_time(self, key: str) -> int | None:
        """The due time of ``key``, if scheduled."""

    def __len__(self) -> int: ...
    def __contains__(self, key: str, /) -> bool: ...
