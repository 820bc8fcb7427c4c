"""The web UI in front of a server with ``--auth``, over real HTTP: sign-in, the key
kept out of the browser and the log, CSRF on every POST, read-only client keys (refused
by the UI itself, not only a disabled button), sign-out."""

from __future__ import annotations

import asyncio
import html
import re

import pytest

from durable_rpc import Client
from tests.ui.conftest import AuthStack, Browserless, signed_in

pytestmark = pytest.mark.timeout(120)


def start_approval(stack: AuthStack, workflow_id: str) -> str:
    async def go() -> str:
        async with await Client.connect(stack.server.address, api_key=stack.admin_key) as c:
            handle = await c.start_workflow("Approval", id=workflow_id, task_queue="ui-q")
            return str(handle.run_id)

    return asyncio.run(go())


def status_of(stack: AuthStack, workflow_id: str) -> str:
    async def go() -> str:
        async with await Client.connect(stack.server.address, api_key=stack.admin_key) as c:
            described = await c.get_handle(workflow_id).describe()
            return str(described.info.status)

    return asyncio.run(go())


def test_a_page_needs_a_sign_in_and_a_bad_key_is_refused_without_being_echoed(
    auth_stack: AuthStack,
) -> None:
    http = Browserless(auth_stack.ui.url)
    page = http.get("/n/default/runs")
    assert "/signin" in page.url and 'name="api_key"' in page.text
    bogus = "drpc_00000000deadbeef_" + "Q" * 43
    refused = http.post("/signin", {"api_key": bogus, "next": "/", "csrf": page.csrf()})
    assert refused.status == 401
    assert "the API key is not valid" in html.unescape(refused.text)
    assert bogus not in refused.text
    assert not any(c.name == "drpc_ui_session" for c in http.jar)


def test_the_cookie_holds_no_key_and_is_http_only_and_strict(auth_stack: AuthStack) -> None:
    http = signed_in(auth_stack, auth_stack.admin_key)
    (cookie,) = [c for c in http.jar if c.name == "drpc_ui_session"]
    assert auth_stack.admin_key not in str(cookie.value)
    assert cookie.has_nonstandard_attr("HttpOnly")
    assert cookie.get_nonstandard_attr("SameSite", "").lower() == "strict"
    page = http.get("/n/default/runs")
    assert auth_stack.admin_key not in page.text
    assert "admin of namespace default" in page.text
    assert auth_stack.admin_key not in auth_stack.ui.log_path.read_text()


def test_a_post_without_the_csrf_token_changes_nothing(auth_stack: AuthStack) -> None:
    run_id = start_approval(auth_stack, "ui-csrf")
    http = signed_in(auth_stack, auth_stack.admin_key)
    fields = {"run": run_id, "reason": "no token", "confirmed": "yes"}
    for token in (None, "forged"):
        sent = fields if token is None else {**fields, "csrf": token}
        refused = http.post("/n/default/runs/ui-csrf/terminate", sent)
        assert refused.status == 403 and "CSRF" in refused.text
    assert status_of(auth_stack, "ui-csrf") == "running"


def test_a_client_key_reads_but_the_ui_refuses_its_terminate(auth_stack: AuthStack) -> None:
    run_id = start_approval(auth_stack, "ui-client-term")
    http = signed_in(auth_stack, auth_stack.client_key)
    page = http.get(f"/n/default/runs/ui-client-term?run={run_id}")
    assert page.status == 200
    text = html.unescape(page.text)
    assert 'id="terminate-button" class="danger" disabled' in text
    assert "terminate needs the admin role; your key is a client key" in text
    # The button is only a hint: a hand-made POST is refused by the UI too.
    refused = http.post(
        "/n/default/runs/ui-client-term/terminate",
        {"csrf": page.csrf(), "run": run_id, "reason": "x", "confirmed": "yes"},
    )
    assert refused.status == 403
    assert "terminate needs the admin role" in html.unescape(refused.text)
    assert status_of(auth_stack, "ui-client-term") == "running"
    # The fleet pages are the admins' (the server opens them to admins only).
    workers = http.get("/n/default/workers")
    assert workers.status == 403 and "needs the admin role" in workers.text


def test_an_admin_terminates_after_confirming_then_signs_out(auth_stack: AuthStack) -> None:
    run_id = start_approval(auth_stack, "ui-admin-term")
    http = signed_in(auth_stack, auth_stack.admin_key)
    page = http.get(f"/n/default/runs/ui-admin-term?run={run_id}")
    asked = http.post(
        "/n/default/runs/ui-admin-term/terminate",
        {"csrf": page.csrf(), "run": run_id, "reason": "from the ui"},
    )
    assert asked.status == 200 and 'id="confirm"' in asked.text
    assert status_of(auth_stack, "ui-admin-term") == "running"  # only asked so far
    done = http.post(
        "/n/default/runs/ui-admin-term/terminate",
        {"csrf": asked.csrf(), "run": run_id, "reason": "from the ui", "confirmed": "yes"},
    )
    assert done.status == 200 and 'id="run-status">terminated' in done.text
    assert status_of(auth_stack, "ui-admin-term") == "terminated"
    out = http.post("/signout", {"csrf": done.csrf()})
    assert out.url.endswith("/signin")
    assert "/signin" in http.get("/n/default/runs").url


def test_a_revoked_key_is_sent_back_to_sign_in(auth_stack: AuthStack) -> None:
    from durable_rpc.v1 import admin_service_pb2
    from tests.security.conftest import make_key

    async def new_key() -> str:
        async with await Client.connect(
            auth_stack.server.address, api_key=auth_stack.root_key
        ) as c:
            return await make_key(c, "admin", "default", "soon-revoked")

    async def revoke(secret: str) -> None:
        async with await Client.connect(
            auth_stack.server.address, api_key=auth_stack.root_key
        ) as c:
            await c.call(
                c.admin_service.RevokeApiKey,
                admin_service_pb2.RevokeApiKeyRequest(
                    key_id=secret.split("_")[1], namespace="default"
                ),
            )

    key = asyncio.run(new_key())
    http = signed_in(auth_stack, key)
    asyncio.run(revoke(key))
    page = http.get("/n/default/runs")
    assert "/signin" in page.url and "revoked" in html.unescape(page.text)


def test_the_namespace_switcher_lists_only_what_the_key_can_see(auth_stack: AuthStack) -> None:
    from durable_rpc.v1 import admin_service_pb2

    async def other_namespace() -> None:
        async with await Client.connect(
            auth_stack.server.address, api_key=auth_stack.root_key
        ) as c:
            await c.call(
                c.admin_service.CreateNamespace,
                admin_service_pb2.CreateNamespaceRequest(namespace="ui-elsewhere"),
            )

    asyncio.run(other_namespace())
    options = re.compile(r'<option value="([^"]+)"[^>]*>[^<]*</option>')
    switcher = re.compile(r'<select id="ns-switch".*?</select>', re.DOTALL)

    def listed(key: str) -> list[str]:
        page = signed_in(auth_stack, key).get("/n/default/runs")
        match = switcher.search(page.text)
        assert match is not None
        return options.findall(match.group(0))

    assert listed(auth_stack.client_key) == ["default"]
    assert {"default", "ui-elsewhere"} <= set(listed(auth_stack.root_key))
    # A key for one namespace reaches nothing of another, through the UI too.
    http = signed_in(auth_stack, auth_stack.client_key)
    refused = http.get("/n/ui-elsewhere/runs")
    assert refused.status == 403 and "PERMISSION_DENIED" in refused.text
