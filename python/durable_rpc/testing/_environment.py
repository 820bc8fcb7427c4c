"""``WorkflowEnvironment``: a real durable-rpc server in the test's own process.

Tests exercise the same gRPC services, store transactions and worker code as production
(nothing is mocked), on an in-memory SQLite database and an ephemeral port, so they run
offline, in parallel and leave nothing on disk. The time-skipping flavour adds a test-only
offset to the store's clock and jumps it whenever nothing can run, so a week-long
``workflow.sleep`` takes milliseconds while ``workflow.now()`` still reports the week.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from types import TracebackType

from durable_rpc.client import Client
from durable_rpc.codec import PayloadCodec
from durable_rpc.server import Server, ServerConfig
from durable_rpc.store import SQLiteStore
from durable_rpc.testing._skipper import TimeSkipper


class WorkflowEnvironment:
    """A running server plus a connected :attr:`client`; use as ``async with``.

    Create one with :meth:`start_local` or :meth:`start_time_skipping`.
    """

    def __init__(
        self, server: Server, store: SQLiteStore, client: Client, skipper: TimeSkipper | None
    ) -> None:
        self._server = server
        self._store = store
        self._skipper = skipper
        self._closed = False
        self.client = client
        assert server.port is not None
        self.address = f"127.0.0.1:{server.port}"

    @classmethod
    async def start_local(
        cls, *, namespace: str = "default", payload_codec: PayloadCodec | None = None
    ) -> WorkflowEnvironment:
        """An environment on the real clock. ``payload_codec``: the :attr:`client`'s (and
        so its workers') codec, as ``Client.connect`` takes it."""
        return await cls._start(namespace, time_skipping=False, payload_codec=payload_codec)

    @classmethod
    async def start_time_skipping(
        cls,
        *,
        namespace: str = "default",
        start_time: dt.datetime | None = None,
        payload_codec: PayloadCodec | None = None,
    ) -> WorkflowEnvironment:
        """An environment whose clock jumps to the next timer, backoff, deadline or
        schedule firing as soon as nothing is queued or running; see
        :attr:`auto_time_skipping` and :meth:`sleep`. ``start_time`` (timezone-aware) sets
        where the server's clock starts (default: now), e.g. just before a DST change."""
        offset_ms = 0
        if start_time is not None:
            if start_time.tzinfo is None:
                raise ValueError("start_time must be timezone-aware")
            offset_ms = round(start_time.timestamp() * 1000) - round(time.time() * 1000)
        return await cls._start(
            namespace, time_skipping=True, clock_offset_ms=offset_ms, payload_codec=payload_codec
        )

    @classmethod
    async def _start(
        cls,
        namespace: str,
        *,
        time_skipping: bool,
        clock_offset_ms: int = 0,
        payload_codec: PayloadCodec | None = None,
    ) -> WorkflowEnvironment:
        store = SQLiteStore(":memory:", clock_offset_ms=clock_offset_ms)
        config = ServerConfig(
            db_url="sqlite://:memory:",
            listen="127.0.0.1:0",
            # Short: a worker stopped by the test should not hold a poll for long.
            poll_timeout_s=2.0,
            shutdown_grace_s=1.0,
        )
        server = Server(config, store=store)
        await server.start()
        try:
            client = await Client.connect(
                f"127.0.0.1:{server.port}", namespace=namespace, payload_codec=payload_codec
            )
            if namespace != "default":
                await store.ensure_namespace(namespace)
        except BaseException:
            await server.stop()
            raise
        skipper = TimeSkipper(server, store) if time_skipping else None
        if skipper is not None:
            skipper.start()
        return cls(server, store, client, skipper)

    @property
    def supports_time_skipping(self) -> bool:
        return self._skipper is not None

    @property
    def auto_time_skipping(self) -> bool:
        """Whether the clock jumps by itself when nothing can run (time-skipping only).

        Turn it off to let a test act (signal, query) while a run waits on a timer, and
        drive time with :meth:`sleep` instead."""
        return self._skipper is not None and self._skipper.auto

    @auto_time_skipping.setter
    def auto_time_skipping(self, enabled: bool) -> None:
        if self._skipper is None:
            raise RuntimeError("this environment does not skip time (use start_time_skipping)")
        self._skipper.auto = enabled

    async def now(self) -> dt.datetime:
        """The server's clock (the database clock, plus any skipped time)."""
        ms = await self._store.now_ms()
        return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)

    async def sleep(self, duration: float | dt.timedelta) -> None:
        """Let ``duration`` (seconds or a timedelta) pass on the server's clock.

        Time-skipping: the clock advances by ``duration`` without waiting, firing whatever
        comes due on the way in order (it waits in real time only while something is
        running). Local: an ordinary ``asyncio.sleep``."""
        seconds = duration.total_seconds() if isinstance(duration, dt.timedelta) else duration
        if self._skipper is None:
            await asyncio.sleep(seconds)
            return
        await self._skipper.advance(round(seconds * 1000))

    async def shutdown(self) -> None:
        """Stop the skipper, close the client, stop the server and close the store."""
        if self._closed:
            return
        self._closed = True
        if self._skipper is not None:
            await self._skipper.stop()
        await self.client.close()
        await self._server.stop()

    async def __aenter__(self) -> WorkflowEnvironment:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.shutdown()
