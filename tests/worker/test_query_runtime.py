"""Query handlers on a replayed WorkflowInstance: read-only, typed, never the run."""

from __future__ import annotations

import pytest

from durable_rpc import converter, workflow
from durable_rpc.workflow._api import current
from durable_rpc.workflow._runtime import QueryError
from tests.worker.activations import activation, instance, signal, start


@workflow.defn(name="Queried")
class Queried:
    def __init__(self) -> None:
        self.items: list[str] = []

    @workflow.signal
    def add(self, item: str) -> None:
        self.items.append(item)

    @workflow.query
    def size(self, extra: int) -> int:
        return len(self.items) + extra

    @workflow.query
    def sneaky_timer(self) -> int:
        current().start_timer((1, 0))  # tries to produce a command
        return 0

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)


def test_query_reads_the_replayed_state() -> None:
    wf = instance(Queried)
    wf.activate(activation(start(Queried), signal("add", "a"), signal("add", "b")))
    answer = wf.query("size", converter.encode_args([10]))
    assert converter.decode(answer, int) == 12


def test_a_query_that_tries_to_change_the_run_fails_the_query_only() -> None:
    wf = instance(Queried)
    wf.activate(activation(start(Queried)))
    with pytest.raises(QueryError, match="query handlers must only read state"):
        wf.query("sneaky_timer", converter.encode_args([]))
    # The instance still answers read-only queries.
    assert converter.decode(wf.query("size", converter.encode_args([0])), int) == 0


def test_unknown_query_names_the_known_ones() -> None:
    wf = instance(Queried)
    wf.activate(activation(start(Queried)))
    with pytest.raises(QueryError, match=r"no query 'nope' \(known: size, sneaky_timer\)"):
        wf.query("nope", b"")


def test_async_query_handlers_are_refused_at_definition() -> None:
    with pytest.raises(TypeError, match="plain"):

        class Bad:
            @workflow.query
            async def q(self) -> int:
                return 1
