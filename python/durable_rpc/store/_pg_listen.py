"""Cross-replica wake-ups for the PostgreSQL store: NOTIFY in the writing transaction,
LISTEN on a dedicated connection in every replica.

A write's listener notes (tasks available, due times, closed runs, answered queries,
settled updates) are sent as one or more ``NOTIFY`` payloads in the same transaction, so
they are delivered if and only if the change committed. Every replica listens on the
channel; a replica skips payloads it sent itself (it delivered those locally right after
its commit, without the round trip).

The LISTEN connection reconnects with a capped backoff. Notifications sent while it was
down are lost, so after every reconnect it tells the listener that work may be due now
(``due_at(0)``): the server then runs ``process_due`` and wakes every long poll, which
re-check the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from psycopg import sql

from durable_rpc._tasks import STOP_TIMEOUT_S, stop_task
from durable_rpc.store._records import StoreListener
from durable_rpc.store._tx import Notes

_log = logging.getLogger("durable_rpc.store.postgres")

#: NOTIFY payloads must stay under 8000 bytes; keep a margin.
MAX_PAYLOAD = 7000
#: How long the listener waits for notifications before probing its connection.
PROBE_INTERVAL_S = 5.0
BACKOFF_MIN_S = 0.1
BACKOFF_MAX_S = 2.0

_KINDS: frozenset[str] = frozenset({"workflow", "activity", "query"})


def _pair_lists(notes: Notes) -> tuple[tuple[str, list[tuple[str, str]]], ...]:
    """The notes' lists of (namespace, id) pairs, by payload key."""
    return (
        ("c", notes.closed),
        ("a", notes.answered),
        ("u", notes.updates),
        ("s", notes.streams),
    )


def encode(origin: str, notes: Notes) -> list[str]:
    """The notes as JSON payloads of at most MAX_PAYLOAD bytes each."""
    items: list[tuple[str, Any]] = [("t", list(t)) for t in sorted(notes.tasks)]
    items += [(key, list(pair)) for key, pairs in _pair_lists(notes) for pair in pairs]
    items += [("k", key_id) for key_id in notes.keys]
    payloads: list[str] = []
    current: dict[str, Any] = {"o": origin}
    if notes.due:
        current["d"] = min(notes.due)
    size = len(json.dumps(current))
    held = 0  # items in ``current``
    for key, value in items:
        item_size = len(json.dumps(value)) + 8
        if size + item_size > MAX_PAYLOAD and held:
            payloads.append(json.dumps(current, separators=(",", ":")))
            current = {"o": origin}
            size = len(json.dumps(current))
            held = 0
        current.setdefault(key, []).append(value)
        size += item_size
        held += 1
    payloads.append(json.dumps(current, separators=(",", ":")))
    return payloads


def decode(payload: str) -> tuple[str, Notes] | None:
    """(origin, notes), or None for a payload this version does not understand."""
    try:
        data = json.loads(payload)
        notes = Notes()
        for namespace, queue, kind in data.get("t", ()):
            if kind in _KINDS:
                notes.tasks.add((str(namespace), str(queue), kind))
        if data.get("d") is not None:
            notes.due.add(int(data["d"]))
        for key, pairs in _pair_lists(notes):
            pairs.extend((str(namespace), str(ident)) for namespace, ident in data.get(key, ()))
        notes.keys.extend(str(key_id) for key_id in data.get("k", ()))
        return str(data["o"]), notes
    except (ValueError, KeyError, TypeError):
        return None


def notify_statements(channel: str, payloads: list[str]) -> Iterator[sql.Composed]:
    for payload in payloads:
        yield sql.SQL("NOTIFY {}, {}").format(sql.Identifier(channel), sql.Literal(payload))


class Listener:
    """Runs the LISTEN connection as a task on the store's event loop."""

    def __init__(
        self,
        conninfo: str,
        connect_kwargs: dict[str, Any],
        channel: str,
        origin: str,
        listener: Callable[[], StoreListener | None],
        keys_changed: Callable[[], None] = lambda: None,
    ) -> None:
        self._conninfo = conninfo
        self._kwargs = connect_kwargs
        self._channel = channel
        self._origin = origin
        #: How encode() begins this store's payloads (the origin is their first key).
        self._own_prefix = json.dumps({"o": origin}, separators=(",", ":"))[:-1]
        self._listener = listener
        #: Told when API keys changed elsewhere, or when notifications may have been
        #: missed (the connection was down): a key cache must then be dropped.
        self._keys_changed = keys_changed
        #: Whether LISTEN is in place now: a key cache is only trusted while it is.
        self.live = False
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        #: Successful (re)connections, and notifications delivered (tests, diagnostics).
        self.connections = 0
        self.delivered = 0

    async def start(self, timeout_s: float) -> None:
        """Starts listening; returns once the first LISTEN is in place (or times out,
        in which case the loop keeps trying in the background)."""
        self._task = asyncio.create_task(self._run(), name="durable-rpc-pg-listen")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), timeout_s)

    async def stop(self) -> None:
        await stop_task(self._task, STOP_TIMEOUT_S)
        self._task = None

    async def _run(self) -> None:
        backoff = BACKOFF_MIN_S
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True, **self._kwargs
                )
            except (psycopg.Error, OSError) as exc:
                _log.warning("LISTEN connection failed (retry in %.1fs): %s", backoff, exc)
                await asyncio.sleep(backoff)
                backoff = min(BACKOFF_MAX_S, backoff * 2)
                continue
            try:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                backoff = BACKOFF_MIN_S
                self.connections += 1
                if self.connections > 1:
                    _log.info("LISTEN connection re-established; waking every poller")
                    self._deliver(Notes(due={0}))
                self._ready.set()
                self.live = True
                while True:
                    async for notify in conn.notifies(timeout=PROBE_INTERVAL_S):
                        self._on_payload(notify.payload)
                    # Quiet for a while: make sure the connection is still alive.
                    await conn.execute("SELECT 1")
            except (psycopg.Error, OSError) as exc:
                _log.warning("LISTEN connection lost: %s", exc)
            finally:
                self.live = False
                self._keys_changed()
                with contextlib.suppress(Exception):
                    await conn.close()

    def _on_payload(self, payload: str) -> None:
        if payload.startswith(self._own_prefix):
            return  # this store's own change, delivered locally after its commit
        decoded = decode(payload)
        if decoded is None:
            _log.warning("ignoring an unknown notification payload: %.200s", payload)
            return
        origin, notes = decoded
        if origin != self._origin:
            if notes.keys:
                self._keys_changed()
            self._deliver(notes)

    def _deliver(self, notes: Notes) -> None:
        listener = self._listener()
        if listener is None:
            return
        self.delivered += 1
        try:
            notes.deliver(listener)
        except Exception:
            _log.exception("store listener failed")
