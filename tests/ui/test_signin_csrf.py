"""Signing in is protected like every other form of the UI: a sign-in posted by another
site (another origin, or without the visitor's token) is refused and signs nobody in,
and no page of the UI, the sign-in page included, may be framed by another site."""

from __future__ import annotations

import urllib.parse

import pytest

from durable_rpc.ui._csrf import VISITOR_COOKIE
from durable_rpc.ui._sessions import COOKIE
from tests.ui.conftest import AuthStack, Browserless

pytestmark = pytest.mark.timeout(120)


def visitor(stack: AuthStack) -> tuple[Browserless, str]:
    """A browser that opened the sign-in page: it holds the visitor cookie, and the
    page's token."""
    http = Browserless(stack.ui.url)
    page = http.get("/signin")
    assert page.status == 200
    assert http.cookie(VISITOR_COOKIE) is not None
    return http, page.csrf()


def signed_out(http: Browserless) -> bool:
    return http.cookie(COOKIE) is None and "/signin" in http.get("/n/default/runs").url


@pytest.mark.parametrize(
    ("token", "headers"),
    [
        pytest.param(None, {}, id="no-token"),
        pytest.param("forged", {}, id="a-forged-token"),
        pytest.param("page", {"Origin": "http://127.0.0.1:1"}, id="another-origin"),
        pytest.param("page", {"Origin": "null"}, id="an-opaque-origin"),
        pytest.param("page", {"Sec-Fetch-Site": "same-site"}, id="another-port"),
        pytest.param("page", {"Sec-Fetch-Site": "cross-site"}, id="another-site"),
    ],
)
def test_a_sign_in_posted_by_another_site_is_refused(
    auth_stack: AuthStack, token: str | None, headers: dict[str, str]
) -> None:
    http, page_token = visitor(auth_stack)
    fields = {"api_key": auth_stack.client_key, "next": "/"}
    if token is not None:
        fields["csrf"] = page_token if token == "page" else token
    refused = http.post("/signin", fields, headers)
    assert refused.status == 403 and "CSRF check failed" in refused.text
    assert signed_out(http)


def test_the_sign_in_form_of_this_ui_signs_in(auth_stack: AuthStack) -> None:
    http, token = visitor(auth_stack)
    own = urllib.parse.urlsplit(auth_stack.ui.url).netloc
    fields = {"api_key": auth_stack.admin_key, "next": "/", "csrf": token}
    reply = http.post(
        "/signin", fields, {"Origin": f"http://{own}", "Sec-Fetch-Site": "same-origin"}
    )
    assert reply.status == 200 and reply.url.endswith("/n/default/runs")
    assert http.cookie(COOKIE) is not None


@pytest.mark.parametrize("path", ["/signin", "/n/default/runs", "/static/ui.css", "/nowhere"])
def test_no_page_may_be_framed(auth_stack: AuthStack, path: str) -> None:
    import urllib.request

    # Not following redirects: the answer to this very path carries the headers.
    class Stay(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    opener = urllib.request.build_opener(Stay)
    try:
        reply = opener.open(auth_stack.ui.url + path, timeout=10)
        headers = reply.headers
    except urllib.error.HTTPError as exc:  # a redirect or an error status
        headers = exc.headers
    assert headers["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
