"""Build-id pinning: which deployment build may decide a run (docs/engine.md, "Build ids").

``runs.build_id`` has three states. NULL: undecided -- nothing decided the run yet (a new
run, a continued-as-new run of an unversioned chain, a child, a redriven run); its
workflow tasks go to any worker that registers the definition, as before builds were
used. ``''``: decided unversioned -- its first decision came from a worker without a
build id, and it stays unversioned. Anything else: pinned -- only a worker registered
with that build id claims its workflow tasks (``tasks.build_id`` carries the pin, so the
claim filters on the task row alone: ``_ops_leases.SERVED_BY_WORKER``) or decides it
inline. The build is the one the worker registered (``workers.build_id``), the same the
claim checks, never what a completion says about itself.
"""

from __future__ import annotations

from durable_rpc.store._shared import ACTIVE
from durable_rpc.store._tx import Row, Tx

#: The build of a registered worker ('' for an unregistered one), as a scalar subquery
#: (params: namespace, worker_id).
WORKER_BUILD = (
    "COALESCE((SELECT w.build_id FROM workers w WHERE w.namespace = ? AND w.worker_id = ?), '')"
)


def pin_undecided_run(tx: Tx, run: Row, worker_id: str) -> Row:
    """Records who decides an undecided run: the build of ``worker_id``, or '' (stays
    unversioned). Called by every decision before its commands apply, so continue-as-new
    in the same decision sees the pin. Returns ``run`` with its build id."""
    if run["build_id"] is not None:
        return run
    namespace, run_id = run["namespace"], run["run_id"]
    build = tx.value(
        f"UPDATE runs SET build_id = {WORKER_BUILD} WHERE namespace = ? AND run_id = ? "
        "RETURNING build_id",
        (namespace, worker_id, namespace, run_id),
    )
    if build:
        # A workflow task queued while this one was leased (a signal came) is the run's
        # too: from now on only this build takes it.
        tx.run(
            "UPDATE tasks SET build_id = ? WHERE namespace = ? AND run_id = ? "
            f"AND kind = 'workflow' AND state IN {ACTIVE}",
            (build, namespace, run_id),
        )
    return {**run, "build_id": build}


def may_decide(tx: Tx, run: Row, worker_id: str) -> bool:
    """Whether ``worker_id`` may decide ``run`` (an inline decision: no claim checked it).
    An unpinned run: any worker; a pinned one: a worker registered with its build."""
    pin = run["build_id"]
    if not pin:
        return True
    build = tx.value(f"SELECT {WORKER_BUILD} AS build", (run["namespace"], worker_id))
    return bool(build == pin)


def carried_pin(run: Row) -> str | None:
    """The pin a continue-as-new successor keeps: a pinned run's build (its code must
    replay the new run too, as Temporal keeps a pinned run's version); an unversioned or
    undecided run's successor is undecided, so a chain moves to versioned workers at
    its next run."""
    pin = run["build_id"]
    return pin if pin else None
