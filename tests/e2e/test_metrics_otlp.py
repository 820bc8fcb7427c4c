"""OTLP metrics from a real server process to a real local HTTP receiver, turned on by the
standard OTEL_EXPORTER_OTLP_* variables alone."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from durable_rpc import Client
from tests.e2e.conftest import ServerProcess, eventually


class Receiver:
    """An OTLP/HTTP metrics endpoint: keeps every export request it is sent."""

    def __init__(self) -> None:
        self.requests: list[ExportMetricsServiceRequest] = []
        received = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                assert self.path == "/v1/metrics"
                assert self.headers["Content-Type"] == "application/x-protobuf"
                received.append(ExportMetricsServiceRequest.FromString(body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.http.server_address[1]
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def metric_names(self) -> set[str]:
        return {
            metric.name
            for request in self.requests
            for resource in request.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        }

    def service_names(self) -> set[str]:
        return {
            attribute.value.string_value
            for request in self.requests
            for resource in request.resource_metrics
            for attribute in resource.resource.attributes
            if attribute.key == "service.name"
        }

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


async def test_otlp_variables_export_the_servers_metrics(
    receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", f"http://127.0.0.1:{receiver.port}/v1/metrics"
    )
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "200")  # ms
    server = ServerProcess(tmp_path / "otlp.db", tmp_path / "server.log")
    server.start()
    try:
        client = await Client.connect(server.address)
        try:
            await client.start_workflow("Anything", id="otlp-1", task_queue="otlp")
        finally:
            await client.close()
        await eventually(
            lambda: (
                {"durable_rpc.rpc_duration", "durable_rpc.store_transaction_duration"}
                <= receiver.metric_names()
            ),
            timeout=20,
            what="an OTLP export with the RPC and store metrics",
        )
    finally:
        server.stop()
    assert receiver.service_names() == {"durable-rpc-server"}
    assert "metrics exported with OTLP (http/protobuf)" in server.log_path.read_text()


def test_otlp_asked_for_but_not_installed_is_said_in_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        importlib.import_module("opentelemetry.exporter.otlp.proto.grpc.metric_exporter")
    except ImportError:
        pass  # as expected: the dev environment has the HTTP flavour only
    else:
        pytest.skip("the OTLP gRPC metric exporter is installed here")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    server = ServerProcess(tmp_path / "otlp.db", tmp_path / "server.log")
    server.start()  # it serves regardless
    server.stop()
    log = server.log_path.read_text()
    assert "OTEL_EXPORTER_OTLP_* is set but no OTLP metric exporter is installed" in log, log
    assert "opentelemetry-exporter-otlp-proto-grpc" in log
