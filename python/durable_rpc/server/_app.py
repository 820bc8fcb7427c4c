"""The server process: store, gRPC services, health, reflection, graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import logging
import signal
import urllib.parse
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from opentelemetry import metrics as otel_metrics
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider

from durable_rpc._payload_refs import DEFAULT_MAX_EXTERNAL_PAYLOAD_BYTES
from durable_rpc.server import _reflection
from durable_rpc.server._admin_service import AdminService
from durable_rpc.server._auth import AuthenticationInterceptor, Authenticator
from durable_rpc.server._due import DueLoop
from durable_rpc.server._handoff import Handoffs
from durable_rpc.server._health import StoreHealth
from durable_rpc.server._interceptor import ErrorInterceptor
from durable_rpc.server._metrics import ServerMetrics
from durable_rpc.server._metrics_interceptor import MetricsServerInterceptor
from durable_rpc.server._notify import Notifier
from durable_rpc.server._payload_service import PayloadService
from durable_rpc.server._retention import (
    DEFAULT_INTERVAL_S,
    DEFAULT_PAYLOAD_GRACE_S,
    RetentionLoop,
)
from durable_rpc.server._schedule_service import ScheduleService
from durable_rpc.server._schedules import ScheduleLoop
from durable_rpc.server._session_service import WorkerSessionService
from durable_rpc.server._worker_service import WorkerService
from durable_rpc.server._workflow_service import WorkflowService
from durable_rpc.store import HistoryLimits, Store, StoreOptions, open_store
from durable_rpc.telemetry import TracingServerInterceptor
from durable_rpc.telemetry._metrics_export import MetricsExport, start_metrics_export
from durable_rpc.v1 import (
    admin_service_pb2,
    admin_service_pb2_grpc,
    payload_service_pb2,
    payload_service_pb2_grpc,
    schedule_service_pb2,
    schedule_service_pb2_grpc,
    service_pb2,
    service_pb2_grpc,
    session_service_pb2,
    session_service_pb2_grpc,
)

log = logging.getLogger("durable_rpc.server")

SERVICE_NAMES = (
    service_pb2.DESCRIPTOR.services_by_name["WorkflowService"].full_name,
    service_pb2.DESCRIPTOR.services_by_name["WorkerService"].full_name,
    admin_service_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
    schedule_service_pb2.DESCRIPTOR.services_by_name["ScheduleService"].full_name,
    payload_service_pb2.DESCRIPTOR.services_by_name["PayloadService"].full_name,
    session_service_pb2.DESCRIPTOR.services_by_name["WorkerSessionService"].full_name,
)


#: Of the shutdown grace period, what is kept for closing the store (at most half of it).
CLOSE_RESERVE_S = 1.0


#: Concurrent calls on one connection (HTTP/2 streams). Calls past it are not reliably
#: queued by grpc's client but refused (UNAVAILABLE: a burst of 1,500 calls on one
#: channel lost 250 with a limit of 1,000), so it sits well above the bursts clients send
#: and the long polls workers hold (one per supervisor cycle, 8 by default, plus one).
MAX_CONCURRENT_STREAMS = 10_000


class InsecureListenError(ValueError):
    """A server asked to listen beyond loopback without TLS and authentication."""


def is_loopback(listen: str) -> bool:
    """Whether HOST:PORT listens on loopback only (what other hosts cannot reach)."""
    host = listen.rsplit(":", 1)[0].strip("[]") if ":" in listen else listen
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # "" (every interface), or a name that may resolve anywhere


class ListenError(OSError):
    """The server cannot listen on its address (in use, or not this host's)."""

    def __init__(self, listen: str) -> None:
        super().__init__(f"cannot listen on {listen}: the address is in use or not available")
        self.listen = listen


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    db_url: str = "sqlite:///durable-rpc.db"
    listen: str = "127.0.0.1:7233"
    # Longest a poll waits for work before answering "nothing".
    poll_timeout_s: float = 20.0
    # Lease on a workflow task: a worker that dies mid-task is replaced after this.
    workflow_task_lease_ms: int = 10_000
    # Requests above this are refused with RESOURCE_EXHAUSTED.
    max_request_bytes: int = 4 * 1024 * 1024
    # In-flight calls get this long to finish on shutdown.
    shutdown_grace_s: float = 10.0
    # grpc.health.v1 follows the store: probed this often (and at once after a call
    # failed with UNAVAILABLE); a probe unanswered this long counts as unusable.
    health_probe_interval_s: float = 1.0
    health_probe_timeout_s: float = 5.0
    # Per-run history limits and the history page size (of a store the server opens).
    history: HistoryLimits = dataclasses.field(default_factory=HistoryLimits)
    # Every call (but health) needs an API key (docs/security.md).
    auth: bool = False
    # TLS: the server's certificate chain and key (PEM files); with a client CA, mTLS
    # (client certificates required and verified against it).
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    # Listening beyond loopback needs TLS and auth unless this is set explicitly.
    insecure: bool = False
    # gRPC's limit on a response: history pages (``history.page_bytes``, a larger single
    # event alone, itself bounded by max_request_bytes) stay below it.
    max_response_bytes: int = 64 * 1024 * 1024
    # How often closed runs past their namespace's retention are looked for (and
    # deleted, by the one replica holding the retention lease: server/_retention.py).
    retention_interval_s: float = DEFAULT_INTERVAL_S
    # A stored payload no run references is deleted by retention once this long has
    # passed since its last upload (the window between an upload and the request that
    # references it; docs/engine.md, "Large payloads").
    payload_grace_s: float = DEFAULT_PAYLOAD_GRACE_S
    # The largest large payload an upload may declare (PAYLOAD_TOO_LARGE past it).
    max_payload_bytes: int = DEFAULT_MAX_EXTERNAL_PAYLOAD_BYTES
    # Serve Prometheus text at http://HOST:PORT/metrics (None: no endpoint). OTLP metrics
    # follow the OTEL_EXPORTER_OTLP_* variables either way (docs/operations.md, Metrics).
    metrics_listen: str | None = None


def check_exposure(config: ServerConfig) -> None:
    """Refuse to serve beyond loopback without TLS and authentication, unless the
    operator said ``insecure`` explicitly: a port anyone can reach must let no one in."""
    if (config.tls_cert is None) != (config.tls_key is None):
        raise ValueError("--tls-cert and --tls-key go together")
    if config.tls_client_ca is not None and config.tls_cert is None:
        raise ValueError("--tls-client-ca needs --tls-cert and --tls-key")
    secured = config.auth and config.tls_cert is not None
    if not is_loopback(config.listen) and not secured and not config.insecure:
        raise InsecureListenError(
            f"refusing to listen on {config.listen}: beyond loopback the server needs TLS "
            "(--tls-cert, --tls-key) and authentication (--auth), or --insecure to serve "
            "without them on purpose"
        )


def exposure_warnings(config: ServerConfig) -> list[str]:
    """What a server so configured leaves open, which ``durable-rpc server`` says loudly at
    start (docs/security.md, "Running it"): no authentication (worse beyond loopback), and
    plain text beyond loopback."""
    warnings = []
    local = is_loopback(config.listen)
    if not config.auth:
        if local:
            warnings.append(
                f"authentication is off: any process on this host that reaches "
                f"{config.listen} can start, read, signal and cancel runs, create "
                "namespaces and make admin keys for every namespace; use --auth"
            )
        else:
            warnings.append(
                f"authentication is off on {config.listen}, beyond loopback: ANYONE who "
                "can reach this port from the network can start, read, signal and cancel "
                "runs, create namespaces and make admin keys for every namespace; use --auth "
                "(and TLS)"
            )
    if not local and config.tls_cert is None:
        warnings.append(
            f"serving plain text (--insecure) on {config.listen}, beyond loopback: API keys, "
            "inputs and results cross the network unencrypted, readable and alterable on "
            "the way; use --tls-cert and --tls-key"
        )
    return warnings


def _without_password(url: str) -> str:
    """The store URL fit for a log: a password in it is a secret."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _tls_credentials(config: ServerConfig) -> grpc.ServerCredentials | None:
    if config.tls_cert is None or config.tls_key is None:
        return None
    client_ca = config.tls_client_ca.read_bytes() if config.tls_client_ca else None
    return grpc.ssl_server_credentials(
        [(config.tls_key.read_bytes(), config.tls_cert.read_bytes())],
        root_certificates=client_ca,
        require_client_auth=client_ca is not None,
    )


class Server:
    """One durable-rpc server. `await start()`, then `await stop()` (or `serve_forever`)."""

    def __init__(self, config: ServerConfig, store: Store | None = None) -> None:
        check_exposure(config)
        self.config = config
        self.store = (
            store
            if store is not None
            else open_store(
                config.db_url,
                StoreOptions(
                    history=config.history, max_external_payload_bytes=config.max_payload_bytes
                ),
            )
        )
        self._grpc: grpc.aio.Server | None = None
        self._due = DueLoop(self.store)
        self._retention = RetentionLoop(
            self.store,
            config.retention_interval_s,
            payload_grace_ms=int(config.payload_grace_s * 1000),
        )
        self._schedules = ScheduleLoop(self.store)
        self._shutting_down = asyncio.Event()
        self._hurry = asyncio.Event()
        self._health = health_aio.HealthServicer()
        self.port: int | None = None
        self.handoffs: Handoffs | None = None
        self._notifier: Notifier | None = None
        self._metrics_export: MetricsExport | None = None
        #: What this server records metrics with (None: nothing is exported).
        self.metrics: ServerMetrics | None = None
        self._store_health = StoreHealth(
            self.store,
            self._health,
            ("", *SERVICE_NAMES),
            interval_s=config.health_probe_interval_s,
            timeout_s=config.health_probe_timeout_s,
            store_name=config.db_url,
        )

    @property
    def metrics_port(self) -> int | None:
        """The port ``/metrics`` is served on (``metrics_listen`` may ask for port 0)."""
        return self._metrics_export.port if self._metrics_export is not None else None

    def _start_metrics(self) -> list[grpc.aio.ServerInterceptor]:
        """The meter provider this server records with: its own export (Prometheus,
        OTLP), else a global SDK provider someone installed (opentelemetry-instrument),
        else none, and then nothing is recorded at all: no interceptor, no per-call cost."""
        self._metrics_export = start_metrics_export(
            "durable-rpc-server", self.config.metrics_listen
        )
        provider: otel_metrics.MeterProvider | None = (
            self._metrics_export.provider if self._metrics_export is not None else None
        )
        if provider is None and isinstance(otel_metrics.get_meter_provider(), SdkMeterProvider):
            provider = otel_metrics.get_meter_provider()
        if provider is None:
            return []
        self.store.set_meter_provider(provider)
        self.metrics = self._due.metrics = ServerMetrics(provider)
        return [MetricsServerInterceptor(provider)]

    async def start(self) -> None:
        metric_interceptors = self._start_metrics()
        await self.store.open()
        notifier = Notifier(
            asyncio.get_running_loop(), self._due.schedule, self._schedules.run_closed
        )
        self._notifier = notifier
        self.store.set_listener(notifier)
        authenticator = Authenticator(self.store) if self.config.auth else None
        server = grpc.aio.server(
            # A call without a valid key is refused first, before its request is received
            # (so it is neither traced nor measured). Then tracing: it sees the final
            # status; metrics next, outside the one that turns errors into statuses.
            interceptors=[
                *([AuthenticationInterceptor(authenticator)] if authenticator else []),
                TracingServerInterceptor(),
                *metric_interceptors,
                ErrorInterceptor(
                    self.config.max_request_bytes, self._store_health.poke, authenticator
                ),
            ],
            options=[
                # grpc refuses a larger request (RESOURCE_EXHAUSTED) before holding it all:
                # a limit above ours let anyone make the server buffer twice as much.
                ("grpc.max_receive_message_length", self.config.max_request_bytes),
                ("grpc.max_send_message_length", self.config.max_response_bytes),
                ("grpc.so_reuseport", 0),
                # A stream's receive window stays at HTTP/2's initial 64 KiB until its
                # handler asks for the request (grpc then opens it to the request's size),
                # instead of growing with the measured bandwidth-delay product: a call not
                # yet authenticated holds no more than that (128 unauthenticated 4 MB
                # calls grew the server by ~200 MB with it, ~5 MB without).
                ("grpc.http2.bdp_probe", 0),
                ("grpc.max_concurrent_streams", MAX_CONCURRENT_STREAMS),
                # Calls that reached grpc's core but not yet this process's event loop. Past
                # the default soft limit (1,000) core answers some of them CANCELLED, which
                # no caller can tell from a real cancellation: a burst of 1,500 starts on one
                # channel lost ~40 that way.
                ("grpc.server.max_pending_requests", 20_000),
                ("grpc.server.max_pending_requests_hard_limit", 40_000),
            ],
        )
        # A start hands its run's first task straight to a waiting poll (_handoff.py).
        handoffs = self.handoffs = Handoffs(notifier.tasks, self.store)
        service_pb2_grpc.add_WorkflowServiceServicer_to_server(
            WorkflowService(
                self.store,
                notifier,
                handoffs=handoffs,
                workflow_task_lease_ms=self.config.workflow_task_lease_ms,
            ),
            server,
        )
        service_pb2_grpc.add_WorkerServiceServicer_to_server(
            WorkerService(
                self.store,
                notifier,
                poll_timeout_s=self.config.poll_timeout_s,
                workflow_task_lease_ms=self.config.workflow_task_lease_ms,
                shutting_down=self._shutting_down,
                handoffs=handoffs,
                metrics=self.metrics,
                auth_required=self.config.auth,
            ),
            server,
        )
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        _reflection.enable(
            server, (*SERVICE_NAMES, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name)
        )
        admin_service_pb2_grpc.add_AdminServiceServicer_to_server(AdminService(self.store), server)
        schedule_service_pb2_grpc.add_ScheduleServiceServicer_to_server(
            ScheduleService(self.store, self._schedules.wake), server
        )
        payload_service_pb2_grpc.add_PayloadServiceServicer_to_server(
            PayloadService(self.store), server
        )
        session_service_pb2_grpc.add_WorkerSessionServiceServicer_to_server(
            WorkerSessionService(self.store), server
        )
        credentials = _tls_credentials(self.config)
        try:
            self.port = (
                server.add_insecure_port(self.config.listen)
                if credentials is None
                else server.add_secure_port(self.config.listen, credentials)
            )
        except RuntimeError as exc:  # grpc's "Failed to bind to address ..."
            raise ListenError(self.config.listen) from exc
        if self.port == 0:
            raise ListenError(self.config.listen)
        await server.start()
        self._grpc = server
        self._due.start()
        self._retention.start()
        self._schedules.start()
        for name in ("", *SERVICE_NAMES):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self._store_health.start()
        if self.metrics is not None:
            self.metrics.start_refreshing(self.store)
        log.info(
            "durable-rpc listening on %s (store %s; %s; %s)",
            self.config.listen,
            _without_password(self.config.db_url),
            "TLS" + (" with client certificates" if self.config.tls_client_ca else "")
            if self.config.tls_cert
            else "plain text",
            "API keys required" if self.config.auth else "no authentication",
        )

    def process_due_now(self) -> None:
        """Fire whatever is due by the store's clock now (used after a test clock skip)."""
        self._due.run_now()
        self._schedules.wake()

    def hurry(self) -> None:
        """Cut a stop's grace period short: calls still in flight are aborted at once (the
        background loops still end and the store is still closed)."""
        self._hurry.set()

    async def stop(self) -> None:
        """Stop accepting calls, let in-flight ones finish, stop the background loops, then
        close the store: all within ``shutdown_grace_s``, the store's close included."""
        loop = asyncio.get_running_loop()
        grace = self.config.shutdown_grace_s
        deadline = loop.time() + grace
        close_reserve = min(CLOSE_RESERVE_S, grace / 2)
        log.info("stopping: calls in flight get up to %gs", grace - close_reserve)
        self._shutting_down.set()  # long polls answer "nothing" right away
        if self._notifier is not None:
            self._notifier.wake_all_pollers()
        loops_deadline = deadline - close_reserve
        await self._store_health.stop(loops_deadline - loop.time())
        await self._health.enter_graceful_shutdown()
        # The loops end while in-flight calls finish: both before the store closes.
        await asyncio.gather(
            self._stop_calls(loops_deadline - loop.time()),
            self._due.stop(loops_deadline - loop.time()),
            self._retention.stop(loops_deadline - loop.time()),
            self._schedules.stop(loops_deadline - loop.time()),
            *([self.metrics.stop(loops_deadline - loop.time())] if self.metrics else []),
        )
        try:
            async with asyncio.timeout(max(close_reserve, deadline - loop.time())):
                await self.store.close()
        except TimeoutError:
            log.error("the store did not close within the shutdown grace period")
        else:
            log.info("store %s closed", _without_password(self.config.db_url))
        if self._metrics_export is not None:
            # Last: an OTLP reader exports what the shutdown itself recorded.
            self._metrics_export.shutdown()
            self._metrics_export = None
        log.info("durable-rpc stopped")

    async def _stop_calls(self, grace_s: float) -> None:
        """Stop serving: in-flight calls get ``grace_s`` (until :meth:`hurry`)."""
        if self._grpc is None:
            return
        stopping = asyncio.ensure_future(self._grpc.stop(max(0.0, grace_s)))
        hurried = asyncio.ensure_future(self._hurry.wait())
        try:
            await asyncio.wait({stopping, hurried}, return_when=asyncio.FIRST_COMPLETED)
            if not stopping.done():
                log.warning("stopping now: aborting the calls still in flight")
                await self._grpc.stop(None)
            await stopping
        finally:
            hurried.cancel()

    async def serve_until_signal(self) -> None:
        """Run until SIGINT or SIGTERM, then stop gracefully. The handlers are in place
        from before the start to the end of the stop: a signal during the start stops the
        server once started, and a second signal cuts the stop's grace period short."""
        loop = asyncio.get_running_loop()
        requested = asyncio.Event()

        def on_signal() -> None:
            if requested.is_set():
                self.hurry()
            requested.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
        try:
            await self.start()
            try:
                await requested.wait()
            finally:
                await self.stop()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(Exception):
                    loop.remove_signal_handler(sig)
