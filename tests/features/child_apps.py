"""Workflows for tests/features/test_children.py (registered by tests/features/apps.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

from durable_rpc import activity, workflow


@dataclass
class Tally:
    n: int
    label: str


@workflow.defn(name="Kid")
class Kid:
    """mode "ok": returns at once; "fail": raises; "wait": waits for the finish signal
    (or cancellation); "cont": continues as new once, then returns."""

    def __init__(self) -> None:
        self.done = False

    @workflow.signal
    def finish(self) -> None:
        self.done = True

    @workflow.run
    async def run(self, n: int, mode: str) -> Tally:
        if mode == "fail":
            raise activity.ApplicationError(f"kid {n} failed", type="KidFailed")
        if mode == "wait":
            await workflow.wait_condition(lambda: self.done)
        if mode == "cont":
            workflow.continue_as_new(n + 1, "ok")
        return Tally(n, f"kid-{n}")


@workflow.defn(name="Parent")
class Parent:
    @workflow.run
    async def run(self, action: str, child_id: str, policy: str) -> dict[str, object]:
        if action in ("result", "cont", "wait"):
            mode = {"result": "ok", "cont": "cont", "wait": "wait"}[action]
            tally = await workflow.execute_child_workflow(Kid.run, 2, mode, id=child_id)
            return {"n": tally.n, "typed": isinstance(tally, Tally)}
        if action == "fail":
            try:
                await workflow.execute_child_workflow(Kid.run, 3, "fail", id=child_id)
            except workflow.ChildWorkflowError as e:
                return {
                    "status": e.status,
                    "cause_type": e.cause.type,
                    "cause": e.cause.message,
                    "id": e.workflow_id,
                }
            return {}
        if action == "dup":
            try:
                await workflow.start_child_workflow(Kid.run, 0, "wait", id=child_id)
            except workflow.ChildWorkflowStartError as e:
                return {"reason": e.reason, "id": e.workflow_id}
            return {}
        if action == "cancel":
            handle = await workflow.start_child_workflow(Kid.run, 0, "wait", id=child_id)
            handle.cancel()
            try:
                await handle
            except workflow.ChildWorkflowError as e:
                return {"status": e.status, "run_id": handle.run_id, "id": handle.id}
            return {}
        if action == "signal":
            # Finish a waiting child by signalling it; a signal to no run fails typed.
            handle = await workflow.start_child_workflow(Kid.run, 7, "wait", id=child_id)
            await handle.signal(Kid.finish)
            tally = await handle
            try:
                await workflow.get_external_workflow_handle(f"{child_id}-ghost").signal("poke")
            except workflow.ExternalSignalError as e:
                return {"n": tally.n, "ghost": e.reason}
            return {"n": tally.n}
        if action == "two":
            # Two children started by one workflow task, then awaited together.
            first, second = await asyncio.gather(
                workflow.execute_child_workflow(Kid.run, 5, "ok", id=f"{child_id}-a"),
                workflow.execute_child_workflow(Kid.run, 6, "ok", id=f"{child_id}-b"),
            )
            return {"n": [first.n, second.n]}
        if action == "options":
            # A child that would wait forever, bounded by its execution timeout.
            try:
                await workflow.execute_child_workflow(
                    Kid.run,
                    4,
                    "wait",
                    id=child_id,
                    execution_timeout=timedelta(milliseconds=700),
                    memo={"from": "parent"},
                    search_attributes={"CustomerId": "kid-of-p"},
                )
            except workflow.ChildWorkflowError as e:
                return {"status": e.status}
            return {}
        # action == "policy": leave the child open and close.
        handle = await workflow.start_child_workflow(
            Kid.run,
            0,
            "wait",
            id=child_id,
            parent_close_policy=workflow.ParentClosePolicy[policy],
        )
        return {"run_id": handle.run_id}
