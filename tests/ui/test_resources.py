"""The web UI's memory stays bounded, whatever visitors send: requests without a cookie
share one session and one connection (a server without authentication), a session holds
one connection whatever namespaces it asks for (and none for a namespace its key cannot
see), and the sessions themselves are bounded (the least recently used is signed out).
Measured on a real UI process (its resident memory, /proc/PID/status)."""

from __future__ import annotations

import http.client
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from durable_rpc.ui._sessions import COOKIE, SESSION_LIMIT
from tests.ui.conftest import AuthStack, Browserless, Stack, signed_in

pytestmark = pytest.mark.timeout(180)

#: What a flood may add to the UI's resident memory once it is warm.
GROWTH_BOUND_MB = 40
FLOOD = 3000
NAMESPACES = 1000


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def flood(base: str, paths: list[str], headers: dict[str, str], threads: int = 4) -> list[int]:
    """GETs every path (over ``threads`` kept-alive connections); their statuses."""
    netloc = urllib.parse.urlsplit(base).netloc

    def worker(share: list[str]) -> list[int]:
        connection = http.client.HTTPConnection(netloc, timeout=30)
        statuses = []
        try:
            for path in share:
                connection.request("GET", path, headers=headers)
                reply = connection.getresponse()
                reply.read()
                statuses.append(reply.status)
                assert "set-cookie" not in {k.lower() for k in reply.headers if k == COOKIE}
        finally:
            connection.close()
        return statuses

    with ThreadPoolExecutor(threads) as pool:
        shares = [paths[i::threads] for i in range(threads)]
        return [status for statuses in pool.map(worker, shares) for status in statuses]


def growth(
    pid: int, warm_up: Callable[[], object], load: Callable[[], object]
) -> tuple[float, float]:
    """(resident MB once warm, after ``load``)."""
    warm_up()
    before = rss_mb(pid)
    load()
    after = rss_mb(pid)
    print(f"UI resident memory: {before:.0f} MB warm, {after:.0f} MB after the flood")
    return before, after


def test_requests_without_a_cookie_share_one_session(stack: Stack) -> None:
    pid = stack.ui.proc.pid
    paths = ["/n/default/runs"] * FLOOD
    statuses: list[int] = []

    def warm_up() -> None:
        flood(stack.ui.url, paths[:100], {})

    def load() -> None:
        statuses.extend(flood(stack.ui.url, paths, {}))

    before, after = growth(pid, warm_up, load)
    assert statuses == [200] * FLOOD
    assert after - before < GROWTH_BOUND_MB, f"{FLOOD} GETs: {before:.0f} -> {after:.0f} MB"
    # Nobody signed in: no visitor was given a session cookie.
    page = Browserless(stack.ui.url)
    assert page.get("/n/default/runs").status == 200
    assert page.cookie(COOKIE) is None


def test_namespaces_a_key_cannot_see_cost_nothing(auth_stack: AuthStack) -> None:
    pid = auth_stack.ui.proc.pid
    session = signed_in(auth_stack, auth_stack.client_key).cookie(COOKIE)
    headers = {"Cookie": f"{COOKIE}={session}"}
    statuses: list[int] = []

    def warm_up() -> None:
        flood(auth_stack.ui.url, [f"/n/warm-{i}/runs" for i in range(100)], headers)

    def load() -> None:
        paths = [f"/n/ns-{i}/runs" for i in range(1, NAMESPACES + 1)]
        statuses.extend(flood(auth_stack.ui.url, paths, headers))

    before, after = growth(pid, warm_up, load)
    assert statuses == [403] * NAMESPACES
    assert after - before < GROWTH_BOUND_MB, f"{NAMESPACES} namespaces: {before:.0f} -> {after:.0f}"
    # The session still works in the namespace it may see.
    assert flood(auth_stack.ui.url, ["/n/default/runs"], headers) == [200]


def test_past_the_session_limit_the_least_recently_used_is_signed_out(
    auth_stack: AuthStack,
) -> None:
    first = signed_in(auth_stack, auth_stack.client_key)
    others = [signed_in(auth_stack, auth_stack.client_key) for _ in range(SESSION_LIMIT - 1)]
    assert first.get("/n/default/runs").status == 200  # now the most recently used
    signed_in(auth_stack, auth_stack.client_key)  # one past the limit
    assert "/signin" in others[0].get("/n/default/runs").url
    assert first.get("/n/default/runs").status == 200
    assert others[1].get("/n/default/runs").status == 200
