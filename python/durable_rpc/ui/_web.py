"""What every page shares: the signed-in session, rendering, and answering failures on the
page (an unknown id, a malformed query, a denied call, an unreachable server) instead of
with a stack trace or a blank page."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from durable_rpc.client import Client
from durable_rpc.errors import (
    DurableRpcError,
    InvalidArgumentError,
    NamespaceNotFoundError,
    NotFoundError,
    PermissionDeniedError,
    StoreUnavailableError,
    UnauthenticatedError,
)
from durable_rpc.ui import _values
from durable_rpc.ui._backend import Backend, denied_reason, error_text
from durable_rpc.ui._csrf import new_token, refusal, set_visitor_token, visitor_token
from durable_rpc.ui._sessions import COOKIE, Session, Sessions, new_session

log = logging.getLogger("durable_rpc.ui")

#: How long the namespace switcher's list is reused before it is asked again.
NAMESPACES_TTL_S = 30.0

_STATUS = {
    NotFoundError: 404,
    NamespaceNotFoundError: 404,
    InvalidArgumentError: 400,
    PermissionDeniedError: 403,
    UnauthenticatedError: 401,
    StoreUnavailableError: 503,
}


class BadInput(Exception):
    """Input the page itself refuses (before any call): shown on the page, status 400."""


@dataclass
class Ui:
    """The app's state: where the server is, the sessions, the templates."""

    backend: Backend
    sessions: Sessions
    #: A key every visitor uses until they sign in with their own (``--api-key-env``).
    default_api_key: str | None
    secure_cookies: bool = False

    def __post_init__(self) -> None:
        folder = resources.files("durable_rpc.ui") / "templates"
        self.templates = Environment(
            loader=FileSystemLoader(str(folder)),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.globals.update(
            time_text=_values.time_text,
            duration_text=_values.duration_text,
            quote=lambda text: quote(str(text), safe=""),
        )
        self._shared: Session | None = None
        #: Until when a visitor without a sign-in is sent to sign in without asking the
        #: server again (it requires a key and the UI has no default key).
        self._sign_in_needed_until = 0.0
        self._shared_lock = asyncio.Lock()

    async def namespaces(self, session: Session) -> list[str]:
        cached = session.namespaces
        if cached is not None and time.monotonic() - cached[0] < NAMESPACES_TTL_S:
            return cached[1]
        names = await self.backend.namespaces(session)
        session.namespaces = (time.monotonic(), names)
        return names

    async def shared_session(self) -> Session | None:
        """The session of every visitor who has not signed in: the default key's, or no
        key's on a server without authentication (None: they must sign in)."""
        async with self._shared_lock:
            if self._shared is not None and not self._shared.closed:
                return self._shared
            if time.monotonic() < self._sign_in_needed_until:
                return None
            try:
                required, caller, connection = await self.backend.identify(self.default_api_key)
            except UnauthenticatedError:
                return None
            if required and not self.default_api_key:
                await connection.close()
                self._sign_in_needed_until = time.monotonic() + NAMESPACES_TTL_S
                return None
            self._shared = new_session(
                self.default_api_key if required else None, caller, shared=True
            )
            self._shared.connection = connection
            return self._shared

    async def end(self, session: Session) -> None:
        """Ends a session whose key the server no longer takes (or that signed out)."""
        if session.shared:
            await session.close()  # the next visitor identifies afresh
        else:
            await self.sessions.drop(session.id)

    async def close(self) -> None:
        await self.sessions.close()
        if self._shared is not None:
            await self._shared.close()


@dataclass
class Page:
    """One request of a signed-in (or auth-free) session."""

    ui: Ui
    request: Request
    session: Session
    namespace: str
    #: The CSRF token this page's forms carry (the session's, or the visitor's).
    csrf: str

    async def client(self) -> Client:
        return await self.ui.backend.client(self.session, self.namespace)

    def denied(self, action: str) -> str | None:
        return denied_reason(self.session.caller, action)

    async def render(self, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        try:
            namespaces = await self.ui.namespaces(self.session)
        except DurableRpcError:
            namespaces = [self.namespace]  # the page itself says what went wrong
        if self.namespace not in namespaces:
            namespaces = [self.namespace, *namespaces]
        html = self.ui.templates.get_template(template).render(
            page=self,
            caller=self.session.caller,
            csrf=self.csrf,
            namespace=self.namespace,
            namespaces=namespaces,
            path=self.request.url.path,
            **context,
        )
        response = HTMLResponse(html, status_code=status)
        no_store(response)
        return response

    async def error(self, exc: BaseException, status: int | None = None) -> HTMLResponse:
        if status is None:
            status = next((s for t, s in _STATUS.items() if isinstance(exc, t)), 500)
        return await self.render("error.html", status=status, message=error_text(exc))


def no_store(response: Response) -> None:
    # Pages show run data a key may see: never kept by a shared cache or the back button.
    response.headers["Cache-Control"] = "no-store"


#: Sent with every response of the UI, its sign-in page, redirects and errors included.
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    # No page of the UI may be framed (clickjacking its sign-in or its actions).
    "X-Frame-Options": "DENY",
    # Only this UI's own script runs: text from runs (ids, payloads, failures) is escaped
    # by the templates, and even a missed escape could not run a script. The timeline's
    # SVG carries its own <style>.
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
}


class SecurityHeaders:
    """ASGI middleware adding ``SECURITY_HEADERS`` to every HTTP response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)


Handler = Callable[[Page], Awaitable[Response]]


def page(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """An endpoint behind the session: no session -> the shared session of visitors who
    need no sign-in, else sign-in; a POST that fails the CSRF checks (``_csrf``) ->
    refused; a failed call -> said on the page."""

    @functools.wraps(handler)
    async def endpoint(request: Request) -> Response:
        ui: Ui = request.app.state.ui
        session = await ui.sessions.get(request.cookies.get(COOKIE))
        if session is None:
            try:
                session = await ui.shared_session()
            except DurableRpcError as exc:
                return plain_error(ui, error_text(exc), 503)
            if session is None:
                return RedirectResponse(f"/signin?next={quote(_here(request))}", 303)
        visitor = visitor_token(request) if session.shared else None
        new_visitor = session.shared and visitor is None
        expected = session.csrf if not session.shared else visitor
        namespace = request.path_params.get("namespace") or (session.caller.namespace or "default")
        current = Page(ui, request, session, namespace, expected or new_token())
        if request.method == "POST":
            form = await request.form()
            refused = refusal(request, form.get("csrf"), expected)
            if refused is not None:
                response: Response = await current.render("error.html", status=403, message=refused)
                if new_visitor:
                    set_visitor_token(response, current.csrf, secure=ui.secure_cookies)
                return response
        try:
            response = await handler(current)
        except UnauthenticatedError as exc:
            # A revoked or expired key: sign in again.
            await ui.end(session)
            response = RedirectResponse(
                f"/signin?next={quote(_here(request))}&why={quote(exc.message)}", 303
            )
            response.delete_cookie(COOKIE)
            return response
        except BadInput as exc:
            response = await current.render("error.html", status=400, message=str(exc))
        except DurableRpcError as exc:
            response = await current.error(exc)
        except Exception:
            log.exception("page %s failed", request.url.path)
            response = await current.render(
                "error.html", status=500, message=error_text(RuntimeError())
            )
        if new_visitor:
            set_visitor_token(response, current.csrf, secure=ui.secure_cookies)
        return response

    return endpoint


async def sign_in(ui: Ui, api_key: str) -> Session:
    """A new session for ``api_key`` (raises UnauthenticatedError for a key the server
    refuses); it keeps the connection its key was checked on."""
    required, caller, connection = await ui.backend.identify(api_key)
    session = new_session(api_key if required else None, caller)
    session.connection = connection
    await ui.sessions.add(session)
    return session


def set_cookie(ui: Ui, response: Response, session: Session) -> None:
    response.set_cookie(
        COOKIE,
        session.id,
        httponly=True,
        samesite="strict",
        secure=ui.secure_cookies,
        path="/",
    )


def plain_error(ui: Ui, message: str, status: int) -> HTMLResponse:
    """An error page for a visitor without a session (no navigation)."""
    html = ui.templates.get_template("bare_error.html").render(message=message)
    response = HTMLResponse(html, status_code=status)
    no_store(response)
    return response


def _here(request: Request) -> str:
    query = f"?{request.url.query}" if request.url.query and request.method == "GET" else ""
    return request.url.path + query if request.method == "GET" else "/"


def run_path(namespace: str, workflow_id: str) -> str:
    """The path of a run's page. Each part is quoted whole: a workflow id may hold ``/``,
    spaces, ``?`` or ``#``."""
    return f"/n/{quote(namespace, safe='')}/runs/{quote(workflow_id, safe='')}"


def safe_next(target: str | None) -> str:
    """Only a path of this UI: never an open redirect to another site."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
