"""Browser sessions of the web UI: who signed in with which key, and their CSRF token.

The API key never goes back to the browser. The cookie holds only a random session id
(HTTP-only, SameSite=Strict); the key lives in this process's memory, keyed by that id,
so a stolen cookie is worth nothing once the process restarts or the user signs out, and
the key cannot be read by page scripts or leak into logs and caches. Each session has its
own CSRF token, which every form posts back (compared in constant time).
"""

from __future__ import annotations

import hmac
import secrets
import time
from dataclasses import dataclass, field

from durable_rpc.client import Client

COOKIE = "drpc_ui_session"
#: A session nobody used for this long is forgotten (its clients closed).
IDLE_TIMEOUT_S = 12 * 3600


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
    last_used: float = field(default_factory=time.monotonic)
    #: One client per namespace this session looked at (a Client is bound to one).
    clients: dict[str, Client] = field(default_factory=dict)

    def csrf_ok(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token.encode(), self.csrf.encode())

    async def close(self) -> None:
        clients, self.clients = list(self.clients.values()), {}
        for client in clients:
            await client.close()


class Sessions:
    """The sessions of this process (in memory: a restart signs everyone out)."""

    def __init__(self) -> None:
        self._by_id: dict[str, Session] = {}

    def new(self, api_key: str | None, caller: Caller) -> Session:
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), api_key, caller)
        self._by_id[session.id] = session
        return session

    async def get(self, session_id: str | None) -> Session | None:
        await self._expire()
        session = self._by_id.get(session_id or "")
        if session is not None:
            session.last_used = time.monotonic()
        return session

    async def drop(self, session_id: str | None) -> None:
        session = self._by_id.pop(session_id or "", None)
        if session is not None:
            await session.close()

    async def close(self) -> None:
        for session_id in list(self._by_id):
            await self.drop(session_id)

    async def _expire(self) -> None:
        cutoff = time.monotonic() - IDLE_TIMEOUT_S
        for session_id in [s.id for s in self._by_id.values() if s.last_used < cutoff]:
            await self.drop(session_id)
