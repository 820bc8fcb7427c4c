"""``durable-rpc server``."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from durable_rpc._loop import run_event_loop
from durable_rpc.server import Server, ServerConfig
from durable_rpc.server._app import check_exposure, exposure_warnings
from durable_rpc.store import HistoryLimits
from durable_rpc.telemetry import EXPORTERS, configure_tracing
from durable_rpc.telemetry._metrics_export import split_listen

_LIMITS = HistoryLimits()
_log = logging.getLogger("durable_rpc.server")


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
@click.option(
    "--history-max-events",
    type=click.IntRange(min=1),
    default=_LIMITS.max_events,
    show_default=True,
    help="A run's hard history limit in events: new input past it is refused "
    "(HISTORY_LIMIT_EXCEEDED) and a workflow task passing it fails the run.",
)
@click.option(
    "--history-max-bytes",
    type=click.IntRange(min=1),
    default=_LIMITS.max_bytes,
    show_default=True,
    help="A run's hard history limit in bytes of serialized events.",
)
@click.option(
    "--history-warn-events",
    type=click.IntRange(min=1),
    default=_LIMITS.warn_events,
    show_default=True,
    help="From this many events describe warns and continue-as-new is suggested.",
)
@click.option(
    "--history-warn-bytes",
    type=click.IntRange(min=1),
    default=_LIMITS.warn_bytes,
    show_default=True,
    help="From this many bytes describe warns and continue-as-new is suggested.",
)
@click.option(
    "--history-page-bytes",
    type=click.IntRange(min=1),
    default=_LIMITS.page_bytes,
    show_default=True,
    help="Most bytes of history events in one response (a larger single event comes alone).",
)
@click.option(
    "--max-response-bytes",
    type=click.IntRange(min=1024),
    default=ServerConfig.max_response_bytes,
    show_default=True,
    help="gRPC's limit on a response (must hold a history page and its largest event).",
)
@click.option(
    "--retention-interval",
    type=click.FloatRange(min=0, min_open=True),
    default=ServerConfig.retention_interval_s,
    show_default=True,
    help="Seconds between two looks for closed runs past their namespace's retention "
    "(one replica of a cluster deletes them).",
)
@click.option(
    "--payload-grace",
    type=click.FloatRange(min=0),
    default=ServerConfig.payload_grace_s,
    show_default=True,
    help="Seconds a stored large payload that no run references is kept after its last "
    "upload, before retention deletes it.",
)
@click.option(
    "--max-payload-bytes",
    type=click.IntRange(min=1),
    default=ServerConfig.max_payload_bytes,
    show_default=True,
    help="The largest large payload a client or worker may upload (PAYLOAD_TOO_LARGE past "
    "it); clients download up to their own max_external_payload_bytes.",
)
@click.option(
    "--auth", is_flag=True, help="Require an API key on every call but health (docs/security.md)."
)
@click.option(
    "--tls-cert",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Serve TLS with this PEM certificate (chain); needs --tls-key.",
)
@click.option(
    "--tls-key",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The PEM private key of --tls-cert.",
)
@click.option(
    "--tls-client-ca",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Require client certificates signed by this CA (mTLS).",
)
@click.option(
    "--insecure",
    is_flag=True,
    help="Serve beyond loopback without TLS and --auth (refused otherwise).",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    help="Least severe log records printed: DEBUG, INFO, WARNING, ERROR or CRITICAL.",
)
@click.option(
    "--trace-exporter",
    type=click.Choice(EXPORTERS),
    default=None,
    help="Export OpenTelemetry spans (otlp reads the standard OTEL_EXPORTER_OTLP_* "
    "variables). Default: leave OpenTelemetry as configured (e.g. opentelemetry-instrument).",
)
@click.option(
    "--metrics-listen",
    default=None,
    metavar="HOST:PORT",
    help="Serve Prometheus metrics at http://HOST:PORT/metrics. OTLP metrics are exported "
    "when the standard OTEL_EXPORTER_OTLP_* variables are set (docs/operations.md, Metrics).",
)
def server(
    db_url: str,
    listen: str,
    workflow_task_lease: float,
    poll_timeout: float,
    history_max_events: int,
    history_max_bytes: int,
    history_warn_events: int,
    history_warn_bytes: int,
    history_page_bytes: int,
    max_response_bytes: int,
    retention_interval: float,
    payload_grace: float,
    max_payload_bytes: int,
    auth: bool,
    tls_cert: Path | None,
    tls_key: Path | None,
    tls_client_ca: Path | None,
    insecure: bool,
    log_level: str,
    trace_exporter: str | None,
    metrics_listen: str | None,
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
        history=_history_limits(
            history_max_events,
            history_max_bytes,
            history_warn_events,
            history_warn_bytes,
            history_page_bytes,
        ),
        max_response_bytes=max_response_bytes,
        retention_interval_s=retention_interval,
        payload_grace_s=payload_grace,
        max_payload_bytes=max_payload_bytes,
        auth=auth,
        tls_cert=tls_cert,
        tls_key=tls_key,
        tls_client_ca=tls_client_ca,
        insecure=insecure,
        metrics_listen=metrics_listen,
    )
    try:
        check_exposure(config)
        if metrics_listen is not None:
            split_listen(metrics_listen)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    for warning in exposure_warnings(config):
        _log.warning("%s (docs/security.md)", warning)
    run_event_loop(Server(config).serve_until_signal())


def _history_limits(
    max_events: int, max_bytes: int, warn_events: int, warn_bytes: int, page_bytes: int
) -> HistoryLimits:
    try:
        return HistoryLimits(max_events, max_bytes, warn_events, warn_bytes, page_bytes)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
