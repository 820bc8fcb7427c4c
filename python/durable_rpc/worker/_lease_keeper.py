"""Keeps running activities' leases alive, and notices when one is lost.

One background task per worker. It sleeps until the lease book's next deadline, sends
a heartbeat for every lease due (at half its window, carrying the details last given
to ``activity.heartbeat``), and tells an attempt to stop when its lease is lost: the
server answered LEASE_LOST. A stopped attempt never completes; a newer owner holds a
higher fencing token.

A lease that lapsed by this process's clock (the server was unreachable, the process was
paused) is not given up: the server still takes the holder's heartbeats and report while
its token is the task's latest (nobody claimed the task since), so the attempt
runs on, keeps heartbeating, and only the server's LEASE_LOST stops it. Stopping it
locally would throw away an effect that may already have happened.

An attempt in a worker session is the exception: its authority is also the session's,
and past the session's lease or TTL another worker may hold the session (and rebuild its
resources). So the keeper stops it, as a lost lease, when the session deadline this
worker last observed passes (the earlier of the holder lease, renewed by the session's
heartbeats, claims and handle renews, and the TTL), heartbeating it at least at half the
session lease so a healthy attempt keeps it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from google.protobuf import timestamp_pb2

from durable_rpc import _core, converter
from durable_rpc.activity._context import ActivityContext
from durable_rpc.errors import DurableRpcError, LeaseLostError
from durable_rpc.v1 import payload_pb2, service_pb2
from durable_rpc.worker._client import WorkerClient, call
from durable_rpc.worker._server_link import ServerLink, is_transient

log = logging.getLogger("durable_rpc.worker")

# Without any hint from the server, assume a short window: heartbeating early is cheap,
# losing a lease is not.
DEFAULT_WINDOW_MS = 10_000
# After a failed (not lost) heartbeat, wait this long before trying again.
RETRY_MS = 500
# Bounds on one sleep: the upper one so a missed wake-up cannot stall heartbeats (and
# expiry, which the book's next_deadline does not include, is noticed); the lower one
# so leases already due but waiting on an in-flight heartbeat do not spin the loop.
MAX_SLEEP_S = 1.0
MIN_SLEEP_S = 0.05


def now_ms() -> int:
    return int(time.monotonic() * 1000)


def lease_window_ms(expires_at: timestamp_pb2.Timestamp | None, cap_ms: int | None) -> int:
    """How long the lease lasts from now, as far as this process can tell.

    The server's expiry is database time; comparing it with the local wall clock is
    only an estimate, so it is capped by the heartbeat timeout (the real bound on the
    gap between heartbeats) and the shorter of the two wins.
    """
    windows = []
    if expires_at is not None and (expires_at.seconds or expires_at.nanos):
        remaining = expires_at.ToMilliseconds() - int(time.time() * 1000)
        if remaining > 0:
            windows.append(remaining)
    if cap_ms:
        windows.append(cap_ms)
    return min(windows) if windows else DEFAULT_WINDOW_MS


def session_deadline_ms(context: ActivityContext) -> int | None:
    """When the attempt's session authority ends by this worker's view (wall-clock epoch
    ms, compared with the local clock like lease_window_ms): the earlier of the holder
    lease and the TTL. None without a session (or one not yet held)."""
    session = context.session()
    if session is None:
        return None
    ends = [
        int(moment.timestamp() * 1000)
        for moment in (session.lease_expires_at, session.ttl_expires_at)
        if moment is not None
    ]
    return min(ends) if ends else None


def _with_session(window_ms: int, context: ActivityContext) -> int:
    """The heartbeat window, shortened to the session's remaining holder lease (not when
    that is the TTL: no heartbeat extends it, so heartbeating sooner gains nothing)."""
    session = context.session()
    if session is None or session.lease_expires_at is None:
        return window_ms
    if session.ttl_expires_at is not None and session.ttl_expires_at <= session.lease_expires_at:
        return window_ms
    remaining = int(session.lease_expires_at.timestamp() * 1000) - int(time.time() * 1000)
    return max(1, min(window_ms, remaining))


@dataclass
class HeldLease:
    lease: service_pb2.Lease
    cap_ms: int | None
    context: ActivityContext
    # Called once, from the keeper's task, when the attempt must stop.
    on_lost: Callable[[], None]
    on_cancel_requested: Callable[[], None]
    not_before_ms: int = 0
    # context.beats as of the last heartbeat sent (see needs_heartbeat).
    sent_beats: int = 0
    # The lease lapsed by the local clock (logged once; cleared by a renewal).
    lapsed: bool = False

    def needs_heartbeat(self) -> bool:
        """Without a heartbeat timeout the keeper heartbeats on the activity's behalf (to
        learn about cancellation; the lease is the start_to_close bound anyway). With
        one, it only forwards the activity's own heartbeats: one that stops calling
        ``activity.heartbeat`` is timed out by the server and retried."""
        return self.cap_ms is None or self.context.beats != self.sent_beats


class LeaseKeeper:
    def __init__(
        self, client: WorkerClient, link: ServerLink, heartbeat_fraction: float = 0.5
    ) -> None:
        self._client = client
        self._link = link
        # Rust bookkeeping, keyed by str(task_id); see durable_rpc._core.LeaseBook.
        self._book = _core.LeaseBook(heartbeat_fraction)
        self._held: dict[int, HeldLease] = {}
        # The held leases whose attempt runs in a worker session (cut off at its end).
        self._in_session: dict[int, HeldLease] = {}
        self._in_flight: set[int] = set()
        self._wake = asyncio.Event()
        self.lost = 0

    def hold(self, held: HeldLease, window_ms: int) -> None:
        self._held[held.lease.task_id] = held
        if held.context.info.session is not None:
            self._in_session[held.lease.task_id] = held
            window_ms = _with_session(window_ms, held.context)
        self._book.track(str(held.lease.task_id), held.lease.fencing_token, window_ms, now_ms())
        self._wake.set()

    def release(self, task_id: int, fencing_token: int | None = None) -> None:
        """Stop keeping the task's lease -- only the one with ``fencing_token`` when given,
        so an attempt ending late cannot drop a newer claim's lease of the same task."""
        held = self._held.get(task_id)
        if held is None or (
            fencing_token is not None and held.lease.fencing_token != fencing_token
        ):
            return
        del self._held[task_id]
        self._in_session.pop(task_id, None)
        self._book.release(str(task_id))

    def lose_older(self, task_id: int, fencing_token: int) -> bool:
        """This worker claimed the task again under ``fencing_token``: a lease it still
        keeps for it with a lower token is lost for certain, so its attempt is stopped.
        Whether there was one."""
        held = self._held.get(task_id)
        if held is None or held.lease.fencing_token >= fencing_token:
            return False
        self._lose(held)
        return True

    async def flush(self, held: HeldLease) -> None:
        """Send details the activity recorded since the last heartbeat, now: an attempt
        about to fail must leave its progress for the next attempt to resume from."""
        task_id = held.lease.task_id
        if held.context.details is None or held.context.beats == held.sent_beats:
            return
        if self._held.get(task_id) is not held or task_id in self._in_flight:
            return
        self._in_flight.add(task_id)
        await self._heartbeat(held)

    async def run(self) -> None:
        heartbeats: set[asyncio.Task[None]] = set()
        try:
            while True:
                self._tick(heartbeats)
                deadline = self._book.next_deadline()
                delay = MAX_SLEEP_S
                if deadline is not None:
                    delay = min(MAX_SLEEP_S, max(MIN_SLEEP_S, (deadline - now_ms()) / 1000))
                cut_off = self._next_session_end()
                if cut_off is not None:
                    # Wake at the session's end, so the cut-off is not a tick late.
                    delay = min(delay, max(0.0, (cut_off - time.time() * 1000) / 1000))
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
        finally:
            for task in heartbeats:
                task.cancel()

    def _next_session_end(self) -> int | None:
        ends = [session_deadline_ms(held.context) for held in self._in_session.values()]
        known = [end for end in ends if end is not None]
        return min(known) if known else None

    def _cut_off_sessions(self) -> None:
        """Stop the attempts whose session authority ended by this worker's view."""
        wall = int(time.time() * 1000)
        for held in list(self._in_session.values()):
            deadline = session_deadline_ms(held.context)
            if deadline is None or wall < deadline:
                continue
            session = held.context.session()
            log.warning(
                "activity task %s stopped: its worker session %s ended (lease or TTL) "
                "by this worker's clock",
                held.lease.task_id,
                session.session_id if session is not None else "?",
            )
            self._lose(held)

    def _tick(self, heartbeats: set[asyncio.Task[None]]) -> None:
        self._cut_off_sessions()
        now = now_ms()
        lapsed: list[tuple[str, int]] = []
        for key, token in self._book.expired(now):
            held = self._held.get(int(key))
            if held is None or held.lease.fencing_token != token:
                self._book.release(key)
                continue
            if not held.lapsed:
                held.lapsed = True
                log.warning(
                    "lease of activity task %s lapsed locally; the attempt goes on until "
                    "the server says it is lost",
                    key,
                )
            lapsed.append((key, token))
        # Lapsed leases are heartbeaten like due ones (the book no longer lists them).
        for key, token in [*lapsed, *self._book.due_for_heartbeat(now)]:
            task_id = int(key)
            held = self._held.get(task_id)
            if held is None or held.lease.fencing_token != token:
                continue
            if task_id in self._in_flight or now < held.not_before_ms:
                continue
            if not held.needs_heartbeat():
                continue
            self._in_flight.add(task_id)
            task = asyncio.ensure_future(self._heartbeat(held))
            heartbeats.add(task)
            task.add_done_callback(heartbeats.discard)

    def _lose(self, held: HeldLease) -> None:
        self.release(held.lease.task_id)
        self.lost += 1
        held.on_lost()

    async def _heartbeat(self, held: HeldLease) -> None:
        task_id = held.lease.task_id
        request = service_pb2.HeartbeatActivityTaskRequest(
            namespace=self._client.namespace, lease=held.lease
        )
        details = held.context.details
        beats = held.context.beats
        if details is not None:
            request.details.CopyFrom(payload_pb2.Payload(data=converter.encode_args(details)))
        try:
            response = await call(
                self._client.worker_service.HeartbeatActivityTask, request, self._link
            )
        except LeaseLostError:
            if self._held.get(task_id) is held:
                self._lose(held)
            return
        except (DurableRpcError, converter.ConversionError) as error:
            # Transient (or bad details): keep the lease we have, try again shortly. An
            # outage is logged once, by the link.
            if not is_transient(error):
                log.warning("heartbeat of activity task %s failed: %s", task_id, error)
            held.not_before_ms = now_ms() + RETRY_MS
            return
        finally:
            self._in_flight.discard(task_id)
        if self._held.get(task_id) is not held:
            return
        held.sent_beats = beats
        held.lapsed = False
        if response.HasField("session"):
            held.context.note_session(response.session)
        window = lease_window_ms(
            response.lease_expires_at if response.HasField("lease_expires_at") else None,
            held.cap_ms,
        )
        if task_id in self._in_session:
            window = _with_session(window, held.context)
        self._book.renewed(str(task_id), held.lease.fencing_token, window, now_ms())
        self._wake.set()
        if response.cancel_requested:
            held.on_cancel_requested()
