"""Worker sessions: a worker's registration of them and the explicit handle's create,
renew and close (``_sessions`` holds the rows and the checks the claim path shares)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from durable_rpc.errors import (
    InvalidSessionOptionsError,
    NotFoundError,
    SessionClosedError,
    SessionHeldError,
    SessionLostError,
    SessionNotFoundError,
    SessionRequirementsUnmetError,
    SessionSlotsExhaustedError,
)
from durable_rpc.store import _sessions
from durable_rpc.store._ops_base import _SqlOpsBase
from durable_rpc.store._session_options import validate_capabilities, validate_session_options
from durable_rpc.store._session_records import WorkerSessionRecord
from durable_rpc.store._shared import require, require_namespace
from durable_rpc.store._tx import Row, Tx
from durable_rpc.v1 import options_pb2


def _locked(tx: Tx, namespace: str, session_id: str) -> Row:
    row = tx.one(
        f"SELECT * FROM worker_sessions WHERE namespace = ? AND session_id = ?{tx.row_lock_suffix}",
        (namespace, session_id),
    )
    if row is None:
        raise SessionNotFoundError(f"no worker session {session_id!r} in {namespace!r}")
    return row


def _held(row: Row, worker_id: str, generation: int) -> None:
    """SessionClosedError / SessionLostError unless ``worker_id`` holds generation
    ``generation`` (a lapsed lease nobody took over is still held: as a late report)."""
    if row["state"] == "closed":
        raise SessionClosedError(
            f"worker session {row['session_id']!r} is closed ({row['close_reason']})"
        )
    if row["holder"] != worker_id or int(row["generation"]) != generation:
        raise SessionLostError(
            f"worker session {row['session_id']!r} generation {generation} is not held by "
            f"{worker_id!r} (holder {row['holder']!r}, generation {row['generation']})"
        )


class _SessionOps(_SqlOpsBase):
    async def register_worker_sessions(
        self, namespace: str, worker_id: str, capabilities: Mapping[str, str], max_sessions: int
    ) -> None:
        """Records that the registered worker takes sessions, with these capabilities and
        at most ``max_sessions`` live ones held at once (replacing what it registered).
        NotFoundError for a worker that is not registered; InvalidSessionOptionsError."""
        require(worker_id, "worker_id")
        caps = dict(capabilities)
        validate_capabilities(caps, max_sessions)

        def op(tx: Tx) -> None:
            require_namespace(tx, namespace)
            if not tx.one(
                "SELECT 1 AS found FROM workers WHERE namespace = ? AND worker_id = ?",
                (namespace, worker_id),
            ):
                raise NotFoundError(f"worker {worker_id!r} is not registered in {namespace!r}")
            tx.run(
                "INSERT INTO worker_session_config (namespace, worker_id, capabilities, "
                "max_sessions) VALUES (?, ?, ?, ?) ON CONFLICT (namespace, worker_id) "
                "DO UPDATE SET capabilities = excluded.capabilities, "
                "max_sessions = excluded.max_sessions",
                (namespace, worker_id, json.dumps(dict(sorted(caps.items()))), max_sessions),
            )

        await self._write(op)

    async def create_worker_session(
        self, namespace: str, worker_id: str, task_queue: str, options: bytes
    ) -> WorkerSessionRecord:
        """Creates the session ``options.session_id`` held by ``worker_id`` (or returns it
        when that worker holds it live; takes it over when its holder was lost).
        SessionHeldError, SessionClosedError, SessionRequirementsUnmetError,
        SessionSlotsExhaustedError, InvalidSessionOptionsError."""
        require(worker_id, "worker_id")
        require(task_queue, "task_queue")
        parsed = options_pb2.SessionOptions.FromString(options)
        if not parsed.session_id:
            raise InvalidSessionOptionsError("an explicit worker session needs a session_id")
        validate_session_options(parsed, "CreateWorkerSession")

        def op(tx: Tx) -> WorkerSessionRecord:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            config = _sessions.worker_config(tx, namespace, worker_id)
            if config is None or not _sessions.meets(config, dict(parsed.requires)):
                raise SessionRequirementsUnmetError(
                    f"worker {worker_id!r} does not meet the requirements of session "
                    f"{parsed.session_id!r}: {dict(parsed.requires)}"
                )
            _sessions.schedule_into(tx, namespace, "", task_queue, parsed, now)
            row = _locked(tx, namespace, parsed.session_id)
            if row["state"] == "closed":
                _held(row, worker_id, -1)
            if _sessions.is_live(row, now):
                if row["holder"] != worker_id:
                    raise SessionHeldError(
                        f"worker session {parsed.session_id!r} is held by {row['holder']!r}"
                    )
                return _sessions.record_of(row, now)
            if _sessions.held_count(tx, namespace, worker_id, now) >= config.max_sessions:
                raise SessionSlotsExhaustedError(
                    f"worker {worker_id!r} already holds {config.max_sessions} live "
                    "sessions (max_concurrent_worker_sessions)"
                )
            taken = _sessions.take(tx, row, worker_id, now)
            assert taken is not None  # the row is locked (or the writer is single)
            return _sessions.record_of(taken, now)

        return await self._write(op)

    async def renew_worker_session(
        self, namespace: str, worker_id: str, session_id: str, generation: int
    ) -> WorkerSessionRecord:
        """Extends the holder's lease by the session's lease length (never past its TTL),
        fenced by holder and generation: SessionLostError otherwise, SessionClosedError
        once closed, SessionNotFoundError."""
        require(worker_id, "worker_id")
        require(session_id, "session_id")

        def op(tx: Tx) -> WorkerSessionRecord:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            row = _locked(tx, namespace, session_id)
            _held(row, worker_id, generation)
            if row["ttl_deadline_ms"] <= now:
                # Past its TTL (the due pass has not closed it yet): no renewal.
                raise SessionClosedError(f"worker session {session_id!r} is past its TTL")
            renewed = tx.one(
                "UPDATE worker_sessions SET lease_expires_ms = CASE WHEN ttl_deadline_ms < "
                "? + lease_ms THEN ttl_deadline_ms ELSE ? + lease_ms END "
                "WHERE namespace = ? AND session_id = ? RETURNING *",
                (now, now, namespace, session_id),
            )
            assert renewed is not None
            return _sessions.record_of(renewed, now)

        return await self._write(op)

    async def close_worker_session(
        self, namespace: str, worker_id: str, session_id: str, generation: int, reason: str
    ) -> WorkerSessionRecord:
        """Closes it (fenced like renew; closing a closed one returns it) and fails its
        queued activities with SessionClosed, in one transaction."""
        require(worker_id, "worker_id")
        require(session_id, "session_id")
        reason = reason or "closed"

        def op(tx: Tx) -> WorkerSessionRecord:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            row = _locked(tx, namespace, session_id)
            if row["state"] == "closed":
                return _sessions.record_of(row, now)
            _held(row, worker_id, generation)
            closed = _sessions.close(tx, namespace, session_id, reason, now)
            assert closed is not None
            return _sessions.record_of(closed, now)

        return await self._write(op)

    async def describe_worker_session(self, namespace: str, session_id: str) -> WorkerSessionRecord:
        """The session as of now (``lost``: its holder's lease lapsed).
        SessionNotFoundError."""
        require(session_id, "session_id")

        def op(tx: Tx) -> WorkerSessionRecord:
            require_namespace(tx, namespace)
            row = tx.one(
                "SELECT * FROM worker_sessions WHERE namespace = ? AND session_id = ?",
                (namespace, session_id),
            )
            if row is None:
                raise SessionNotFoundError(f"no worker session {session_id!r} in {namespace!r}")
            return _sessions.record_of(row, tx.now_ms())

        return await self._read(op)

    async def list_worker_sessions(
        self, namespace: str, task_queue: str, limit: int, after: str = ""
    ) -> list[WorkerSessionRecord]:
        """The open (not closed) sessions of ``task_queue`` as of now, by session id,
        at most ``limit`` of them with an id after ``after``."""
        require(task_queue, "task_queue")

        def op(tx: Tx) -> list[WorkerSessionRecord]:
            require_namespace(tx, namespace)
            # The open sessions only: worker_sessions_queue indexes them.
            rows = tx.all(
                "SELECT * FROM worker_sessions WHERE namespace = ? AND task_queue = ? "
                "AND state <> 'closed' AND session_id > ? ORDER BY session_id LIMIT ?",
                (namespace, task_queue, after, limit),
            )
            now = tx.now_ms()
            return [_sessions.record_of(row, now) for row in rows]

        return await self._read(op)
