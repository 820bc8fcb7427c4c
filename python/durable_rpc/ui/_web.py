"""What every page shares: the signed-in session, rendering, and answering failures on the
page (an unknown id, a malformed query, a denied call, an unreachable server) instead of
with a stack trace or a blank page."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

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
from durable_rpc.ui._sessions import COOKIE, Session, Sessions

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
        self._namespaces: dict[str, tuple[float, list[str]]] = {}

    async def namespaces(self, session: Session) -> list[str]:
        cached = self._namespaces.get(session.id)
        if cached is not None and time.monotonic() - cached[0] < NAMESPACES_TTL_S:
            return cached[1]
        names = await self.backend.namespaces(session)
        self._namespaces[session.id] = (time.monotonic(), names)
        return names


@dataclass
class Page:
    """One request of a signed-in (or auth-free) session."""

    ui: Ui
    request: Request
    session: Session
    namespace: str

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
            csrf=self.session.csrf,
            namespace=self.namespace,
            namespaces=namespaces,
            path=self.request.url.path,
            **context,
        )
        response = HTMLResponse(html, status_code=status)
        _no_store(response)
        return response

    async def error(self, exc: BaseException, status: int | None = None) -> HTMLResponse:
        if status is None:
            status = next((s for t, s in _STATUS.items() if isinstance(exc, t)), 500)
        return await self.render("error.html", status=status, message=error_text(exc))


def _no_store(response: Response) -> None:
    # Pages show run data a key may see: never kept by a shared cache or the back button.
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["X-Frame-Options"] = "DENY"
    # Only this UI's own script runs: text from runs (ids, payloads, failures) is escaped
    # by the templates, and even a missed escape could not run a script. The timeline's
    # SVG carries its own <style>.
    response.headers["Content-Security-Policy"] = (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    )


Handler = Callable[[Page], Awaitable[Response]]


def page(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """An endpoint behind the session: no session -> sign-in (or an auth-free session);
    a POST without the session's CSRF token -> refused; a failed call -> said on the page."""

    @functools.wraps(handler)
    async def endpoint(request: Request) -> Response:
        ui: Ui = request.app.state.ui
        session = await ui.sessions.get(request.cookies.get(COOKIE))
        fresh = False
        if session is None:
            try:
                session = await start_session(ui, ui.default_api_key)
            except UnauthenticatedError:
                session = None
            except DurableRpcError as exc:
                return plain_error(ui, error_text(exc), 503)
            if session is None:
                return RedirectResponse(f"/signin?next={quote(_here(request))}", 303)
            fresh = True
        namespace = request.path_params.get("namespace") or (session.caller.namespace or "default")
        current = Page(ui, request, session, namespace)
        if request.method == "POST":
            form = await request.form()
            token = form.get("csrf")
            if fresh or not session.csrf_ok(token if isinstance(token, str) else None):
                return await current.render(
                    "error.html",
                    status=403,
                    message="the form was stale or not sent by this UI (CSRF check failed):"
                    " reload the page and try again",
                )
        try:
            response = await handler(current)
        except UnauthenticatedError as exc:
            # A revoked or expired key: sign in again.
            await ui.sessions.drop(session.id)
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
        if fresh:
            set_cookie(ui, response, session)
        return response

    return endpoint


async def start_session(ui: Ui, api_key: str | None) -> Session | None:
    """A session for ``api_key`` (None: only if the server needs no key)."""
    required, caller = await ui.backend.identify(api_key)
    if required and not api_key:
        return None
    return ui.sessions.new(api_key if required else None, caller)


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
    _no_store(response)
    return response


def _here(request: Request) -> str:
    query = f"?{request.url.query}" if request.url.query and request.method == "GET" else ""
    return request.url.path + query if request.method == "GET" else "/"


def safe_next(target: str | None) -> str:
    """Only a path of this UI: never an open redirect to another site."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
