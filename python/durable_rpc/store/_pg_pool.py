"""A small, thread-safe pool of synchronous psycopg connections for the PostgreSQL store.

Why not ``psycopg_pool``: its reconnect backoff doubles without a cap (up to
``reconnect_timeout``), so after a longer outage a replica can sit idle for as long again
before it even tries to reconnect, and callers block for the whole ``timeout`` while it
does. The contract here is different and simple:

- connections are opened on demand, up to ``max_size``, and reused most-recent first;
- while the database is unreachable, ``acquire`` fails *fast* with StoreUnavailableError
  (the server answers UNAVAILABLE) and the next connection attempt waits for a capped,
  doubling backoff (``backoff_min_s`` .. ``backoff_max_s``) — so recovery after the
  database comes back takes at most ``backoff_max_s``;
- a connection that failed is closed, and so is every idle one (after a server restart
  they are all dead; finding that out one failed operation at a time is slow).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import pq

from durable_rpc.errors import StoreUnavailableError

_log = logging.getLogger("durable_rpc.store.postgres")


class PgPool:
    def __init__(
        self,
        conninfo: str,
        *,
        max_size: int,
        acquire_timeout_s: float,
        connect_kwargs: dict[str, Any],
        configure: Callable[[psycopg.Connection[Any]], None],
        backoff_min_s: float = 0.1,
        backoff_max_s: float = 2.0,
    ) -> None:
        self._conninfo = conninfo
        self._max_size = max_size
        self._acquire_timeout_s = acquire_timeout_s
        self._kwargs = connect_kwargs
        self._configure = configure
        self._backoff_min_s = backoff_min_s
        self._backoff_max_s = backoff_max_s
        self._cond = threading.Condition()
        self._idle: list[psycopg.Connection[Any]] = []
        self._size = 0  # open connections, idle or lent out
        self._closed = False
        self._backoff_s = 0.0
        self._retry_at = 0.0  # monotonic: no connection attempt before this
        self._last_error = ""
        #: Connections opened (tests and diagnostics).
        self.connects = 0

    def acquire(self) -> psycopg.Connection[Any]:
        deadline = time.monotonic() + self._acquire_timeout_s
        with self._cond:
            while True:
                if self._closed:
                    raise StoreUnavailableError("the store is closed")
                if self._idle:
                    return self._idle.pop()
                if self._size < self._max_size:
                    if time.monotonic() < self._retry_at:
                        raise StoreUnavailableError(
                            f"the database is unreachable ({self._last_error}); reconnecting"
                        )
                    self._size += 1
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StoreUnavailableError("no database connection became free in time")
                self._cond.wait(remaining)
        try:
            conn = psycopg.Connection.connect(self._conninfo, **self._kwargs)
            try:
                self._configure(conn)
            except BaseException:
                conn.close()
                raise
        except BaseException as exc:
            with self._cond:
                self._size -= 1
                self._backoff_s = min(
                    self._backoff_max_s, max(self._backoff_min_s, self._backoff_s * 2)
                )
                self._retry_at = time.monotonic() + self._backoff_s
                self._last_error = str(exc).strip().splitlines()[0] if str(exc) else repr(exc)
                self._cond.notify()
            _log.warning(
                "cannot connect to PostgreSQL (next try in %.1fs): %s", self._backoff_s, exc
            )
            if isinstance(exc, psycopg.Error | OSError):
                raise StoreUnavailableError(f"cannot connect to the database: {exc}") from exc
            raise
        with self._cond:
            self._backoff_s = 0.0
            self._retry_at = 0.0
            self.connects += 1
        return conn

    def release(self, conn: psycopg.Connection[Any], *, discard: bool = False) -> None:
        """Returns ``conn``; closes it instead if it is broken, mid-transaction, or
        ``discard`` (an operation on it failed at the connection level)."""
        reusable = (
            not discard
            and not conn.closed
            and not conn.broken
            and conn.info.transaction_status == pq.TransactionStatus.IDLE
        )
        with self._cond:
            if reusable and not self._closed:
                self._idle.append(conn)
                self._cond.notify()
                return
            self._size -= 1
            self._cond.notify()
        _close_quietly(conn)

    def discard_idle(self) -> None:
        """Closes every idle connection (they are probably as dead as the one that just
        failed: the database restarted, or the network dropped)."""
        with self._cond:
            idle, self._idle = self._idle, []
            self._size -= len(idle)
            self._cond.notify_all()
        for conn in idle:
            _close_quietly(conn)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._size -= len(idle)
            self._cond.notify_all()
        for conn in idle:
            _close_quietly(conn)


def _close_quietly(conn: psycopg.Connection[Any]) -> None:
    with contextlib.suppress(Exception):
        conn.close()
