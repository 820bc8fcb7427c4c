"""Cross-site request forgery: every POST the UI takes, sign-in included, must come from a
form of this UI. Two checks, both needed:

- The browser's word on where the form came from: ``Sec-Fetch-Site`` must be
  ``same-origin`` (browsers without it: an ``Origin`` header must name this UI's host).
  SameSite cookies do not cover this: a page on another port of the same host is the
  same *site*, so its forms reach the UI with the UI's cookies.
- A token the page put in the form: the session's own once signed in; before a sign-in
  (the sign-in form, and visitors of a server without authentication, who share one
  session) the visitor's, kept in a cookie of its own. Compared in constant time.
"""

from __future__ import annotations

import hmac
import secrets
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

#: The token of a visitor who has not signed in (HTTP-only, SameSite=Strict).
VISITOR_COOKIE = "drpc_ui_csrf"
_TOKEN_LENGTH = 43  # secrets.token_urlsafe(32)

STALE = (
    "the form was stale or not sent by this UI (CSRF check failed): reload the page and try again"
)


def new_token() -> str:
    return secrets.token_urlsafe(32)


def visitor_token(request: Request) -> str | None:
    """The visitor's token from its cookie (None: none, or not one this UI made)."""
    token = request.cookies.get(VISITOR_COOKIE, "")
    return token if len(token) == _TOKEN_LENGTH else None


def set_visitor_token(response: Response, token: str, *, secure: bool) -> None:
    response.set_cookie(
        VISITOR_COOKIE, token, httponly=True, samesite="strict", secure=secure, path="/"
    )


def refusal(request: Request, sent: object, expected: str | None) -> str | None:
    """Why this POST is refused (None: it is this UI's own form). ``sent`` is the form's
    ``csrf`` field, ``expected`` the token of the session or visitor."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        if site != "same-origin":
            return f"the form was sent from another site ({site[:20]}): {STALE}"
    else:
        origin = request.headers.get("origin")
        if origin is not None and urlsplit(origin).netloc != request.headers.get("host"):
            return f"the form was sent from another origin: {STALE}"
    if not isinstance(sent, str) or not expected:
        return STALE
    if not hmac.compare_digest(sent.encode(), expected.encode()):
        return STALE
    return None
