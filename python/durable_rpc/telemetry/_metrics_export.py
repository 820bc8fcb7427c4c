"""Where a server's metrics go: Prometheus text at ``/metrics``, OTLP, or both.

The Prometheus exporter is a dependency of durable-rpc; the OTLP one is optional (as for
traces, telemetry/_config.py): install ``opentelemetry-exporter-otlp-proto-grpc`` or
``-proto-http`` and set the standard ``OTEL_EXPORTER_OTLP_*`` variables.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from wsgiref.simple_server import WSGIServer

from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, ExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource

log = logging.getLogger("durable_rpc.server")

#: Any of these set (and OTEL_METRICS_EXPORTER not "none") turns OTLP metrics on.
OTLP_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
_OTLP_MODULES = {
    "grpc": "opentelemetry.exporter.otlp.proto.grpc.metric_exporter",
    "http/protobuf": "opentelemetry.exporter.otlp.proto.http.metric_exporter",
}


class MetricsListenError(ValueError):
    """``--metrics-listen`` is not HOST:PORT, or that address cannot be served."""


def split_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9464`` for IPv6) as (host, port); port 0 picks a free one."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise MetricsListenError(f"--metrics-listen must be HOST:PORT, got {listen!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


@dataclass
class MetricsExport:
    """A meter provider and what it exports to; :meth:`shutdown` flushes and stops it."""

    provider: MeterProvider
    #: The Prometheus endpoint's bound port, when one is served.
    port: int | None = None
    _http: WSGIServer | None = field(default=None, repr=False)

    def shutdown(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        self.provider.shutdown()


def otlp_requested(environ: Mapping[str, str] = os.environ) -> bool:
    if environ.get("OTEL_METRICS_EXPORTER", "").strip().lower() == "none":
        return False
    return any(environ.get(name) for name in OTLP_VARIABLES)


def start_metrics_export(
    service_name: str, prometheus_listen: str | None, environ: Mapping[str, str] = os.environ
) -> MetricsExport | None:
    """A MeterProvider exporting to Prometheus (``prometheus_listen``: served at
    ``http://HOST:PORT/metrics``) and to OTLP (when :func:`otlp_requested`), or None when
    neither is asked for. OTLP asked for but not installed is logged as a warning and
    skipped: the server still serves."""
    readers: list[MetricReader] = []
    http: WSGIServer | None = None
    port: int | None = None
    if prometheus_listen is not None:
        reader, http, port = _prometheus(prometheus_listen)
        readers.append(reader)
    if otlp_requested(environ):
        otlp = _otlp_reader(environ)
        if otlp is not None:
            readers.append(otlp)
    if not readers:
        return None
    name = environ.get("OTEL_SERVICE_NAME") or service_name
    provider = MeterProvider(
        metric_readers=readers,
        resource=Resource.create({SERVICE_NAME: name}),
        exemplar_filter=exemplar_filter(environ),
    )
    return MetricsExport(provider, port, http)


def exemplar_filter(environ: Mapping[str, str] = os.environ) -> ExemplarFilter | None:
    """No exemplars unless ``OTEL_METRICS_EXEMPLAR_FILTER`` asks for them (None: the SDK
    reads it). The SDK's default (``trace_based``) looks up the current span on every
    measurement: a third of a histogram record's cost (12 -> 8 us, measured), paid on
    every RPC and claim, for exemplars Prometheus text does not even show."""
    if environ.get("OTEL_METRICS_EXEMPLAR_FILTER"):
        return None
    return AlwaysOffExemplarFilter()


def _prometheus(listen: str) -> tuple[MetricReader, WSGIServer, int]:
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import start_http_server

    host, port = split_listen(listen)
    # A registry of its own: two servers in one process (tests) never share series.
    registry = CollectorRegistry(auto_describe=True)
    reader = PrometheusMetricReader(scope_info_enabled=False, registry=registry)
    try:
        http, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise MetricsListenError(f"cannot serve metrics on {listen}: {exc}") from exc
    assert isinstance(thread, threading.Thread)
    bound = int(http.server_address[1])
    log.info("metrics served at http://%s:%d/metrics", host, bound)
    return reader, http, bound


def _otlp_reader(environ: Mapping[str, str]) -> MetricReader | None:
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or ""
    ).strip()
    candidates = [protocol] if protocol in _OTLP_MODULES else list(_OTLP_MODULES)
    for candidate in candidates:
        try:
            module = importlib.import_module(_OTLP_MODULES[candidate])
        except ImportError:
            continue
        log.info("metrics exported with OTLP (%s)", candidate)
        # Honours OTEL_METRIC_EXPORT_INTERVAL / _TIMEOUT; the exporter reads the
        # endpoint, headers and certificates from the OTEL_EXPORTER_OTLP_* variables.
        return PeriodicExportingMetricReader(module.OTLPMetricExporter())
    log.warning(
        "OTEL_EXPORTER_OTLP_* is set but no OTLP metric exporter is installed, so metrics "
        "are not exported with OTLP: pip install opentelemetry-exporter-otlp-proto-%s",
        "http" if protocol == "http/protobuf" else "grpc (or -proto-http)",
    )
    return None
