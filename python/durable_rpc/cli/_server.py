"""``durable-rpc server``."""

from __future__ import annotations

import logging

import click

from durable_rpc._loop import run_event_loop
from durable_rpc.server import Server, ServerConfig
from durable_rpc.telemetry import EXPORTERS, configure_tracing


@click.command()
@click.option(
    "--db",
    "db_url",
    default="sqlite:///durable-rpc.db",
    show_default=True,
    envvar="DURABLE_RPC_DB",
    help="Store URL: sqlite:///path, sqlite://:memory:, or postgresql://...",
)
@click.option(
    "--listen", default="127.0.0.1:7233", show_default=True, help="HOST:PORT to serve gRPC on."
)
@click.option(
    "--workflow-task-lease",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds a worker holds a workflow task before another may take it over.",
)
@click.option(
    "--poll-timeout", type=float, default=20.0, show_default=True, help="Long-poll seconds."
)
@click.option("--log-level", default="INFO", show_default=True)
@click.option(
    "--trace-exporter",
    type=click.Choice(EXPORTERS),
    default=None,
    help="Export OpenTelemetry spans (otlp reads the standard OTEL_EXPORTER_OTLP_* "
    "variables). Default: leave OpenTelemetry as configured (e.g. opentelemetry-instrument).",
)
def server(
    db_url: str,
    listen: str,
    workflow_task_lease: float,
    poll_timeout: float,
    log_level: str,
    trace_exporter: str | None,
) -> None:
    """Run the durable-rpc server until SIGINT/SIGTERM."""
    configure_tracing("durable-rpc-server", trace_exporter)
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    config = ServerConfig(
        db_url=db_url,
        listen=listen,
        workflow_task_lease_ms=int(workflow_task_lease * 1000),
        poll_timeout_s=poll_timeout,
    )
    run_event_loop(Server(config).serve_until_signal())
