"""The web application: routes, sign-in and sign-out, static files; and serving it."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from importlib import resources
from urllib.parse import quote

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from durable_rpc.client import TLSConfig
from durable_rpc.errors import DurableRpcError, UnauthenticatedError
from durable_rpc.ui import _actions, _fleet, _runs
from durable_rpc.ui._backend import Backend, error_text
from durable_rpc.ui._csrf import new_token, refusal, set_visitor_token, visitor_token
from durable_rpc.ui._sessions import COOKIE, Sessions
from durable_rpc.ui._web import (
    Page,
    SecurityHeaders,
    Ui,
    no_store,
    page,
    plain_error,
    safe_next,
    set_cookie,
    sign_in,
)

log = logging.getLogger("durable_rpc.ui")
#: An API key is a short token; anything longer is not one (and is not kept).
KEY_LIMIT = 512


def create_app(
    address: str,
    *,
    tls: TLSConfig | None = None,
    default_api_key: str | None = None,
    secure_cookies: bool = False,
) -> Starlette:
    ui = Ui(Backend(address, tls), Sessions(), default_api_key, secure_cookies)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await ui.close()

    static = StaticFiles(directory=str(resources.files("durable_rpc.ui") / "static"))
    app = Starlette(
        routes=[
            Route("/", page(_home)),
            Route("/healthz", _healthz),
            Route("/signin", _signin_form, methods=["GET"]),
            Route("/signin", _signin, methods=["POST"]),
            Route("/signout", page(_signout), methods=["POST"]),
            Route("/switch", page(_switch)),
            Route("/namespaces", page(_fleet.namespaces_page)),
            Route("/n/{namespace}/runs", page(_runs.runs_page)),
            Route("/n/{namespace}/batch", page(_actions.batch_action), methods=["POST"]),
            # A workflow id may hold "/": the rest of the path is the id (and on a POST,
            # the last segment the action). Links quote the id whole.
            Route("/n/{namespace}/runs/{workflow_id:path}", page(_runs.run_page)),
            Route(
                "/n/{namespace}/runs/{workflow_id:path}/{action}",
                page(_actions.run_action),
                methods=["POST"],
            ),
            Route("/n/{namespace}/task-queues", page(_fleet.task_queues_page)),
            Route("/n/{namespace}/workers", page(_fleet.workers_page)),
            Route("/n/{namespace}/schedules", page(_fleet.schedules_page)),
            Route(
                "/n/{namespace}/schedules/{schedule_id}/pause",
                page(_actions.schedule_pause),
                methods=["POST"],
            ),
            Mount("/static", static, name="static"),
        ],
        lifespan=lifespan,
        middleware=[Middleware(SecurityHeaders)],
        exception_handlers={404: _not_found, 405: _not_allowed, 500: _crashed},
    )
    app.state.ui = ui
    return app


async def _home(page: Page) -> Response:
    return RedirectResponse(f"/n/{quote(page.namespace, safe='')}/runs", 303)


async def _healthz(request: Request) -> Response:
    return PlainTextResponse("ok")


async def _switch(page: Page) -> Response:
    target = page.request.query_params.get("namespace", "").strip() or page.namespace
    return RedirectResponse(f"/n/{quote(target, safe='')}/runs", 303)


async def _signin_form(request: Request, message: str = "", status: int = 200) -> Response:
    ui: Ui = request.app.state.ui
    why = message or request.query_params.get("why", "")
    token = visitor_token(request)
    csrf = token or new_token()
    html = ui.templates.get_template("signin.html").render(
        message=why[:300],
        next=safe_next(request.query_params.get("next")),
        csrf=csrf,
    )
    response = HTMLResponse(html, status_code=status)
    no_store(response)
    if token is None:
        set_visitor_token(response, csrf, secure=ui.secure_cookies)
    return response


async def _signin(request: Request) -> Response:
    ui: Ui = request.app.state.ui
    form = await request.form()
    # A sign-in is an action too: another site must not sign this browser in with a key
    # of its choosing.
    refused = refusal(request, form.get("csrf"), visitor_token(request))
    if refused is not None:
        return await _signin_form(request, refused, 403)
    key = form.get("api_key")
    key = key.strip() if isinstance(key, str) else ""
    if not key or len(key) > KEY_LIMIT:
        return await _signin_form(request, "enter an API key", 400)
    try:
        session = await sign_in(ui, key)
    except UnauthenticatedError as exc:
        # The server's reason (malformed, not valid, revoked, expired): never the key.
        return await _signin_form(request, exc.message, 401)
    except DurableRpcError as exc:
        return plain_error(ui, error_text(exc), 503)
    target = form.get("next")
    response = RedirectResponse(safe_next(target if isinstance(target, str) else None), 303)
    old = request.cookies.get(COOKIE)
    await ui.sessions.drop(old)
    set_cookie(ui, response, session)
    return response


async def _signout(page: Page) -> Response:
    if not page.session.shared:  # the shared session stays for the other visitors
        await page.ui.sessions.drop(page.session.id)
    response = RedirectResponse("/signin", 303)
    response.delete_cookie(COOKIE, path="/")
    return response


async def _not_found(request: Request, exc: Exception) -> Response:
    ui: Ui = request.app.state.ui
    return plain_error(ui, "no such page", 404)


async def _not_allowed(request: Request, exc: Exception) -> Response:
    ui: Ui = request.app.state.ui
    return plain_error(ui, "this page does not take that method", 405)


async def _crashed(request: Request, exc: Exception) -> Response:
    log.error("request %s failed: %s", request.url.path, type(exc).__name__)
    ui: Ui = request.app.state.ui
    return plain_error(ui, error_text(RuntimeError()), 500)


def serve(
    address: str,
    listen: str,
    *,
    tls: TLSConfig | None = None,
    default_api_key: str | None = None,
    secure_cookies: bool = False,
) -> None:
    """Run the UI until interrupted (blocking)."""
    host, _, port = listen.rpartition(":")
    app = create_app(
        address, tls=tls, default_api_key=default_api_key, secure_cookies=secure_cookies
    )
    config = uvicorn.Config(
        app,
        host=host.strip("[]") or "127.0.0.1",
        port=int(port),
        log_level="info",
        # Access lines would carry every run id and query; the UI logs its failures.
        access_log=False,
        server_header=False,
    )
    uvicorn.Server(config).run()
