"""``durable-rpc ui``: the web UI, a separate process that is a gRPC client of the server."""

from __future__ import annotations

import logging
import os
import re

import click

from durable_rpc.cli._admin import address_option
from durable_rpc.client import TLSConfig
from durable_rpc.server._app import is_loopback

log = logging.getLogger("durable_rpc.ui")

#: Where the UI listens unless told (the README's quickstart opens it).
DEFAULT_LISTEN = "127.0.0.1:7243"
_LISTEN = re.compile(r"^(\[[0-9a-fA-F:]+\]|[^:\s]+):(\d{1,5})$")


@click.command("ui")
@address_option
@click.option(
    "--listen",
    default=DEFAULT_LISTEN,
    show_default=True,
    help="HOST:PORT the web UI listens on (keep it on loopback, or put TLS in front).",
)
@click.option(
    "--api-key-env",
    default=None,
    metavar="VAR",
    help="An environment variable holding an API key every visitor uses until they sign "
    "in with their own (default: visitors sign in when the server requires a key).",
)
@click.option(
    "--secure-cookies",
    is_flag=True,
    help="Mark the session cookie Secure (when the UI is served over HTTPS by a proxy).",
)
def ui(address: str, listen: str, api_key_env: str | None, secure_cookies: bool) -> None:
    """Serve the web UI: runs, run timelines, why a run is stuck, queues and workers.

    TLS to the server comes from the DURABLE_RPC_TLS_* variables, as for every client.
    """
    match = _LISTEN.match(listen)
    if match is None or not 0 < int(match.group(2)) < 65536:
        raise click.BadParameter(f"{listen!r} is not HOST:PORT", param_hint="--listen")
    default_key = None
    if api_key_env is not None:
        default_key = os.environ.get(api_key_env, "").strip() or None
        if default_key is None:
            raise click.BadParameter(
                f"the variable {api_key_env} is not set", param_hint="--api-key-env"
            )
    # Imported here: the web stack is loaded only by this command.
    from durable_rpc.ui._app import serve

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    click.echo(f"durable-rpc ui: http://{listen} (server {address})", err=True)
    if not is_loopback(listen):
        log.warning("%s (docs/security.md)", _exposure_warning(listen, api_key_env))
    serve(
        address,
        listen,
        tls=TLSConfig.from_env(),
        default_api_key=default_key,
        secure_cookies=secure_cookies,
    )


def _exposure_warning(listen: str, api_key_env: str | None) -> str:
    """What a UI served beyond loopback leaves open."""
    who = (
        f"every visitor acts with the key in {api_key_env} without signing in, so anyone "
        "who reaches it"
        if api_key_env is not None
        else "unless the server requires API keys (--auth), anyone who reaches it"
    )
    return (
        f"the web UI listens on {listen}, beyond loopback, over plain HTTP: {who} can "
        "read, start, signal and cancel runs, and sign-in keys cross the network "
        "unencrypted; keep it on loopback or put TLS and access control in front"
    )
