"""The bounded sticky cache (``Worker(sticky_cache=StickyCacheOptions(...))``) through a
real server and real workers: its entry, byte and TTL bounds, its metrics, and that a
run decides the same whether its instance was kept, evicted or superseded.

Most tests step a worker by hand (poll one workflow task, execute it), so which worker
decides which task is certain and every counter can be asserted exactly."""

from __future__ import annotations

import functools
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from durable_rpc import Client, StickyCacheMetrics, StickyCacheOptions, Worker, workflow
from durable_rpc.client import WorkflowHandle
from durable_rpc.testing import Replayer, WorkflowEnvironment
from durable_rpc.v1 import history_pb2
from durable_rpc.worker import _worker as worker_module
from tests.e2e.conftest import ServerProcess, eventually
from tests.telemetry.test_metrics import collect, labels

QUEUE = "sticky"


@pytest.fixture(autouse=True)
def keep_short_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """These runs have tens of events, below the worker's LIVE_MIN_EVENTS: keep them
    anyway (tests/features/test_live_instances.py checks the threshold itself)."""
    monkeypatch.setattr(worker_module, "LIVE_MIN_EVENTS", 0)


@workflow.defn(name="StickyCollector")
class Collector:
    """Each signal's number, recorded through a side effect (a command every task)."""

    def __init__(self) -> None:
        self.got: list[int] = []
        self.done = False

    @workflow.signal
    def add(self, n: int) -> None:
        self.got.append(n)

    @workflow.signal
    def finish(self) -> None:
        self.done = True

    def more_than(self, seen: int) -> bool:
        return len(self.got) > seen or self.done

    @workflow.run
    async def run(self) -> list[int]:
        seen = 0
        out: list[int] = []
        while True:
            await workflow.wait_condition(functools.partial(self.more_than, seen))
            if len(self.got) == seen:
                return out
            for n in self.got[seen:]:
                out.append(workflow.side_effect(functools.partial(int.__mul__, n, 10)))
            seen = len(self.got)


def stepped_worker(env: WorkflowEnvironment, **options: Any) -> Worker:
    return Worker(
        env.client,
        task_queue=QUEUE,
        workflows=[Collector],
        sticky_cache=StickyCacheOptions(**options),
    )


async def step(worker: Worker) -> None:
    """``worker`` claims the one workflow task ready and decides it."""
    task = await worker.poll_workflow_task()
    assert task is not None, "no workflow task was ready"
    assert await worker.execute_workflow_task(task) == "completed"


async def start(env: WorkflowEnvironment, worker: Worker, workflow_id: str) -> WorkflowHandle:
    handle = await env.client.start_workflow(Collector.run, id=workflow_id, task_queue=QUEUE)
    await step(worker)
    return handle


async def signal(handle: WorkflowHandle, worker: Worker, n: int) -> None:
    await handle.signal(Collector.add, n)
    await step(worker)


async def finish(handle: WorkflowHandle, worker: Worker) -> list[int]:
    await handle.signal(Collector.finish)
    await step(worker)
    result: list[int] = await handle.result(timeout=10)
    # Every decision is what a replay from event 1 produces.
    Replayer([Collector]).replay(history_pb2.History(events=await handle.history()))
    return result


def consumed_bytes(events: list[history_pb2.HistoryEvent]) -> int:
    """The encoded size of the events the last recorded workflow task was handed."""
    last = [e for e in events if e.HasField("workflow_task_completed")][-1]
    seen = last.workflow_task_completed.last_seen_event_id
    return len(history_pb2.History(events=events[:seen]).SerializeToString())


def counts(m: StickyCacheMetrics) -> tuple[int, int, int, int]:
    return m.hits, m.misses, m.evictions, m.forced_cold_replays


async def test_a_run_signalled_n_times_hits_its_kept_instance() -> None:
    async with await WorkflowEnvironment.start_local() as env:
        worker = stepped_worker(env)
        await worker.register()
        handle = await start(env, worker, "signalled")
        for n in range(5):
            await signal(handle, worker, n)
            m = worker.sticky_cache_metrics()
            assert counts(m) == (n + 1, 1, 0, 0)
            # The entry accounts for exactly the encoded history its machine consumed.
            assert m.entries == 1
            assert m.history_bytes == consumed_bytes(await handle.history())
        assert await finish(handle, worker) == [0, 10, 20, 30, 40]
        # The closing task continued the instance too; a closed run is not kept.
        assert worker.sticky_cache_metrics() == StickyCacheMetrics(6, 1, 0, 0, 0, 0)
        await worker.stop()


async def test_a_byte_bound_below_one_history_forces_cold_replays() -> None:
    async with await WorkflowEnvironment.start_local() as env:
        worker = stepped_worker(env, max_history_bytes=64)
        await worker.register()
        handle = await start(env, worker, "too-big")
        for n in range(3):
            await signal(handle, worker, n)
        assert await finish(handle, worker) == [0, 10, 20]
        # Every task replayed cold; each kept instance (but the closing one's) was
        # too big to keep.
        assert worker.sticky_cache_metrics() == StickyCacheMetrics(0, 5, 4, 0, 0, 0)
        await worker.stop()


async def test_the_byte_bound_evicts_the_least_recently_used() -> None:
    async with await WorkflowEnvironment.start_local() as env:
        probe = stepped_worker(env)
        await probe.register()
        await start(env, probe, "probe-1")
        one = probe.sticky_cache_metrics().history_bytes
        await probe.stop()
        # Room for two started runs, not three (their ids are as long as the probe's).
        worker = stepped_worker(env, max_history_bytes=2 * one + one // 2)
        await worker.register()
        a = await start(env, worker, "bytes-a")
        await start(env, worker, "bytes-b")
        assert worker.sticky_cache_metrics().entries == 2
        await start(env, worker, "bytes-c")
        m = worker.sticky_cache_metrics()
        assert (m.entries, m.evictions) == (2, 1)
        assert m.history_bytes <= 2 * one + one // 2
        await signal(a, worker, 1)  # a was the least recently used: evicted
        m = worker.sticky_cache_metrics()
        # a's longer history is kept again: b goes, and c too if the two do not fit.
        assert (m.hits, m.misses, m.forced_cold_replays) == (0, 4, 0)
        assert m.evictions == 2 + (2 - m.entries)
        assert m.history_bytes <= 2 * one + one // 2
        assert await finish(a, worker) == [10]
        await worker.stop()


async def test_entries_expire_their_ttl_after_they_were_put() -> None:
    now = [1000.0]
    async with await WorkflowEnvironment.start_local() as env:
        worker = stepped_worker(env, ttl=timedelta(seconds=60))
        assert worker.live_runs is not None
        worker.live_runs.clock = lambda: now[0]
        await worker.register()
        handle = await start(env, worker, "ttl")
        now[0] += 59
        await signal(handle, worker, 1)  # 59 s after it was put: still there
        assert counts(worker.sticky_cache_metrics()) == (1, 1, 0, 0)
        now[0] += 60  # 60 s after the second task put it again: expired
        await signal(handle, worker, 2)
        assert counts(worker.sticky_cache_metrics()) == (1, 2, 1, 0)
        # Expired with no task reading it: the metrics sweep it out.
        now[0] += 60
        m = worker.sticky_cache_metrics()
        assert (m.evictions, m.entries, m.history_bytes) == (2, 0, 0)
        assert await finish(handle, worker) == [10, 20]
        await worker.stop()


async def test_past_max_entries_the_least_recently_used_run_is_evicted() -> None:
    async with await WorkflowEnvironment.start_local() as env:
        worker = stepped_worker(env, max_entries=2)
        await worker.register()
        a = await start(env, worker, "lru-a")
        b = await start(env, worker, "lru-b")
        c = await start(env, worker, "lru-c")  # evicts a
        assert counts(worker.sticky_cache_metrics()) == (0, 3, 1, 0)
        await signal(a, worker, 1)  # a: miss; kept again, it evicts b
        assert counts(worker.sticky_cache_metrics()) == (0, 4, 2, 0)
        await signal(c, worker, 2)  # c: still kept
        assert counts(worker.sticky_cache_metrics()) == (1, 4, 2, 0)
        await signal(b, worker, 3)  # b: evicted by a's return; kept again, evicts a
        assert counts(worker.sticky_cache_metrics()) == (1, 5, 3, 0)
        assert worker.sticky_cache_metrics().entries == 2
        assert [await finish(h, worker) for h in (a, b, c)] == [[10], [30], [20]]
        m = worker.sticky_cache_metrics()
        assert (m.entries, m.history_bytes) == (0, 0)
        await worker.stop()


async def test_later_tasks_another_worker_decided_are_replayed_on_the_instance() -> None:
    # The kept instance's own decision is the first one after what it knows: the tasks
    # another worker recorded after it are replayed on it, as a cold replay would.
    async with await WorkflowEnvironment.start_local() as env:
        first, second = stepped_worker(env), stepped_worker(env)
        await first.register()
        await second.register()
        handle = await start(env, first, "two-workers")
        await signal(handle, first, 1)
        await signal(handle, second, 2)
        await signal(handle, second, 3)
        await signal(handle, first, 4)
        assert counts(first.sticky_cache_metrics()) == (2, 1, 0, 0)
        assert counts(second.sticky_cache_metrics()) == (1, 1, 0, 0)
        assert await finish(handle, first) == [10, 20, 30, 40]
        assert counts(first.sticky_cache_metrics()) == (3, 1, 0, 0)
        await first.stop()
        await second.stop()


def _db_files(db: Path) -> list[Path]:
    return [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]


async def test_a_decision_the_server_lost_forces_a_cold_replay(
    server: ServerProcess, tmp_path: Path
) -> None:
    # The server's database is restored from a backup taken before the first worker's
    # decision was recorded: another worker decides that task again, at another claim,
    # so the instance the first worker kept is not what history says.
    client = await Client.connect(server.address)
    first = Worker(client, task_queue=QUEUE, workflows=[Collector])
    second = Worker(client, task_queue=QUEUE, workflows=[Collector])
    await first.register()
    await second.register()
    handle = await client.start_workflow(Collector.run, id="restored", task_queue=QUEUE)
    await step(first)
    await signal(handle, first, 1)
    await handle.signal(Collector.add, 2)  # its task is queued in the backup
    assert server.terminate() == 0
    backup = tmp_path / "backup"
    backup.mkdir()
    for f in _db_files(server.db_path):
        if f.exists():
            shutil.copy2(f, backup / f.name)
    server.start()
    await step(first)  # decided and kept, then lost with the restore
    assert counts(first.sticky_cache_metrics()) == (2, 1, 0, 0)
    assert server.terminate() == 0
    for f in _db_files(server.db_path):
        f.unlink(missing_ok=True)
        if (backup / f.name).exists():
            shutil.copy2(backup / f.name, f)
    server.start()
    await step(second)  # the same task, claimed and decided again
    await signal(handle, first, 3)
    assert counts(first.sticky_cache_metrics()) == (2, 1, 0, 1)
    # Replayed cold, the new instance is kept and continues.
    assert await finish(handle, first) == [10, 20, 30]
    assert counts(first.sticky_cache_metrics()) == (3, 1, 0, 1)
    await first.stop()
    await second.stop()
    await client.close()


async def test_completion_and_shutdown_empty_the_cache_and_otel_reports_it() -> None:
    reader = InMemoryMetricReader()
    async with await WorkflowEnvironment.start_local() as env:
        async with Worker(
            env.client,
            task_queue=QUEUE,
            workflows=[Collector],
            meter_provider=MeterProvider(metric_readers=[reader]),
        ) as worker:
            done = await env.client.start_workflow(Collector.run, id="done", task_queue=QUEUE)
            open_ = await env.client.start_workflow(Collector.run, id="open", task_queue=QUEUE)
            await done.signal(Collector.add, 1)
            await open_.signal(Collector.add, 2)
            await done.signal(Collector.finish)
            assert await done.result(timeout=10) == [10]

            async def one_kept() -> bool:
                m = worker.sticky_cache_metrics()
                return m.entries == 1 and m.hits + m.misses >= 5

            # The open run's instance stays once its signal was decided; the closed
            # run's left with its closing decision.
            await eventually(one_kept, timeout=10, what="only the open run kept")
            kept = worker.sticky_cache_metrics().history_bytes
            assert kept > 0
            got = collect(reader)
            where = labels(namespace="default", task_queue=QUEUE)
            assert got["durable_rpc.sticky_cache_entries"][where].value == 1
            assert got["durable_rpc.sticky_cache_history_bytes"][where].value == kept
            assert got["durable_rpc.sticky_cache_evictions"][where].value == 0
        # The worker stopped: nothing kept.
        m = worker.sticky_cache_metrics()
        assert (m.entries, m.history_bytes, m.evictions) == (0, 0, 0)
        assert collect(reader)["durable_rpc.sticky_cache_entries"][where].value == 0


async def test_max_entries_zero_disables_the_cache() -> None:
    async with await WorkflowEnvironment.start_local() as env:
        worker = stepped_worker(env, max_entries=0)
        assert worker.live_runs is None
        await worker.register()
        handle = await start(env, worker, "off")
        await signal(handle, worker, 1)
        assert await finish(handle, worker) == [10]
        assert worker.sticky_cache_metrics() == StickyCacheMetrics(0, 0, 0, 0, 0, 0)
        await worker.stop()
