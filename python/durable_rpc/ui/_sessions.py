"""Browser sessions of the web UI: who signed in with which key, and their CSRF token.

The API key never goes back to the browser. The cookie holds only a random session id
(HTTP-only, SameSite=Strict); the key lives in this process's memory, keyed by that id,
so a stolen cookie is worth nothing once the process restarts or the user signs out, and
the key cannot be read by page scripts or leak into logs and caches. Each session has its
own CSRF token, which every form posts back (compared in constant time).

Only a sign-in makes a session. A visitor who needs none (a server without
authentication, or a UI started with a default key) shares one session that is never
stored per visitor, so requests without a cookie cost no memory. Each session holds at
most one connection to the server, whatever the namespaces it looks at, and there are at
most ``SESSION_LIMIT`` sessions: past it the least recently used one is signed out.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from durable_rpc.client import Client

COOKIE = "drpc_ui_session"
#: A session nobody used for this long is forgotten (its connection closed).
IDLE_TIMEOUT_S = 12 * 3600
#: Sessions kept at once; a new sign-in past it signs out the least recently used one.
SESSION_LIMIT = 256


@dataclass(frozen=True)
class Caller:
    """Who the session's key is, as GetServerInfo told it. ``role`` None: the server has
    authentication off (every caller may do everything)."""

    role: str | None
    #: The one namespace the key is for; None: every namespace.
    namespace: str | None
    key_id: str = ""
    name: str = ""

    @property
    def is_admin(self) -> bool:
        return self.role is None or self.role == "admin"

    def may_see(self, namespace: str) -> bool:
        return self.namespace is None or self.namespace == namespace

    def describe(self) -> str:
        if self.role is None:
            return "no sign-in needed (the server has authentication off)"
        scope = "every namespace" if self.namespace is None else f"namespace {self.namespace}"
        label = f" ({self.name})" if self.name else ""
        return f"key {self.key_id}{label}: {self.role} of {scope}"


@dataclass
class Session:
    id: str
    csrf: str
    #: None: no key (a server without authentication).
    api_key: str | None
    caller: Caller
    #: The one connection to the server (bound to the key), opened on first use.
    connection: Client | None = None
    #: True: the session every visitor without a sign-in shares (it has no cookie).
    shared: bool = False
    last_used: float = field(default_factory=time.monotonic)
    #: The namespace switcher's list and when it was read.
    namespaces: tuple[float, list[str]] | None = None
    closed: bool = False
    #: Held while the connection is opened (concurrent requests open one).
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def close(self) -> None:
        self.closed = True
        connection, self.connection = self.connection, None
        if connection is not None:
            await connection.close()


def new_session(api_key: str | None, caller: Caller, *, shared: bool = False) -> Session:
    return Session(
        secrets.token_urlsafe(32), secrets.token_urlsafe(32), api_key, caller, shared=shared
    )


class Sessions:
    """The signed-in sessions of this process (in memory: a restart signs everyone out),
    least recently used first."""

    def __init__(self, limit: int = SESSION_LIMIT) -> None:
        self._limit = limit
        self._by_id: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_id)

    async def add(self, session: Session) -> None:
        self._by_id[session.id] = session
        while len(self._by_id) > self._limit:
            _, oldest = self._by_id.popitem(last=False)
            await oldest.close()

    async def get(self, session_id: str | None) -> Session | None:
        await self._expire()
        session = self._by_id.get(session_id or "")
        if session is not None:
            session.last_used = time.monotonic()
            self._by_id.move_to_end(session.id)
        return session

    async def drop(self, session_id: str | None) -> None:
        session = self._by_id.pop(session_id or "", None)
        if session is not None:
            await session.close()

    async def close(self) -> None:
        for session_id in list(self._by_id):
            await self.drop(session_id)

    async def _expire(self) -> None:
        # Least recently used first: the expired ones are at the front.
        cutoff = time.monotonic() - IDLE_TIMEOUT_S
        while self._by_id:
            oldest = next(iter(self._by_id.values()))
            if oldest.last_used >= cutoff:
                return
            await self.drop(oldest.id)
