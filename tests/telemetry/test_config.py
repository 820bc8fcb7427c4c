"""configure_tracing / build_tracer_provider."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from durable_rpc.telemetry import build_tracer_provider, configure_tracing
from durable_rpc.telemetry._config import _OTLP_MODULES as OTLP_TRACE_EXPORTERS


def test_none_leaves_opentelemetry_unconfigured() -> None:
    before = trace.get_tracer_provider()
    assert configure_tracing("durable-rpc-server", None) is None
    assert trace.get_tracer_provider() is before
    assert not isinstance(before, TracerProvider)


def test_console_provider_carries_the_service_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    provider = build_tracer_provider("durable-rpc-server", "console")
    try:
        assert provider.resource.attributes["service.name"] == "durable-rpc-server"
    finally:
        provider.shutdown()


def test_otel_service_name_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    provider = build_tracer_provider("durable-rpc-server", "console")
    try:
        assert provider.resource.attributes["service.name"] == "from-env"
    finally:
        provider.shutdown()


def test_unknown_exporter_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown trace exporter 'jaeger'"):
        build_tracer_provider("svc", "jaeger")


def test_otlp_without_the_package_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    # The dev install has the OTLP/HTTP exporter (the metrics tests use it): hide both
    # exporters (a None entry in sys.modules makes their import fail as if absent).
    for module in OTLP_TRACE_EXPORTERS:
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ModuleNotFoundError, match="pip install opentelemetry-exporter-otlp"):
        build_tracer_provider("svc", "otlp")


def test_configure_console_exports_spans_in_a_fresh_process() -> None:
    # The global provider can be set once per process, so this runs in its own interpreter.
    script = textwrap.dedent(
        """
        from opentelemetry import trace
        from durable_rpc.telemetry import configure_tracing, workflow_task_span

        provider = configure_tracing("durable-rpc-worker", "console")
        assert trace.get_tracer_provider() is provider
        with workflow_task_span("Order", "order-1", "run-1", 1, None):
            pass
        provider.shutdown()
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert '"name": "RunWorkflowTask:Order"' in done.stdout
    assert '"service.name": "durable-rpc-worker"' in done.stdout
