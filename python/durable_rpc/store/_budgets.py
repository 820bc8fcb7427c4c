"""Namespace budgets (``workflow.reserve()``): the store side, inside the transactions
that record decisions and close runs.

A budget is a row of ``budgets`` (namespace, name, capacity). A reservation is a row of
``budget_reservations``: ``held`` (its units are taken) or ``waiting`` (FIFO by ``id``).
The rule: the units held by a budget's reservations never exceed its capacity; a
reservation is granted when its amount fits in what is free *and* no reservation of the
budget waits before it (strict FIFO, so a large reservation is never starved by small
ones); a release returns the units at once (no refill rate: a budget bounds what open
reservations hold at one time, like a semaphore). Every change that may free units (a
release, a run close, a raised capacity) locks the budget row (PostgreSQL: FOR UPDATE,
so two replicas never over-grant; SQLite has one writer) and grants the waiting
reservations that now fit, in the same transaction: each gets its BudgetReserved event
and a workflow task that wakes its run.

Nothing here runs when a run never reserved: the close reads whether the run has a
reservation in the statement that closes it (``close_run``), and the decision path
only comes here for a budget command.
"""

from __future__ import annotations

from google.protobuf.message import Message

from durable_rpc.errors import InvalidArgumentError
from durable_rpc.store._budget_records import Budget
from durable_rpc.store._tx import Row, Tx
from durable_rpc.v1 import history_pb2

#: The stable reasons of a refused reservation (BudgetReserveFailed.reason).
BUDGET_NOT_FOUND = "BUDGET_NOT_FOUND"
BUDGET_AMOUNT_EXCEEDS_CAPACITY = "BUDGET_AMOUNT_EXCEEDS_CAPACITY"
#: A capacity above this is a mistake (and keeps sums far from 64-bit overflow).
MAX_CAPACITY = 10**15


def budget_tables(bigint: str, identity: str) -> tuple[str, ...]:
    """The budgets migration's tables (same shape on both backends)."""
    return (
        f"""CREATE TABLE budgets (
            namespace TEXT NOT NULL,
            name TEXT NOT NULL,
            capacity {bigint} NOT NULL CHECK (capacity > 0),
            updated_at_ms {bigint} NOT NULL,
            PRIMARY KEY (namespace, name)
        )""",
        f"""CREATE TABLE budget_reservations (
            id {identity},
            namespace TEXT NOT NULL,
            run_id TEXT NOT NULL,
            seq {bigint} NOT NULL,
            budget TEXT NOT NULL,
            amount {bigint} NOT NULL CHECK (amount > 0),
            state TEXT NOT NULL,
            requested_at_ms {bigint} NOT NULL,
            granted_at_ms {bigint},
            UNIQUE (namespace, run_id, seq)
        )""",
        "CREATE INDEX budget_reservations_by_budget "
        "ON budget_reservations (namespace, budget, state, id)",
    )


def check_capacity(capacity: int) -> None:
    if not 1 <= capacity <= MAX_CAPACITY:
        raise InvalidArgumentError(
            f"a budget's capacity must be between 1 and {MAX_CAPACITY}, got {capacity}"
        )


def budget_row(tx: Tx, namespace: str, name: str) -> Row | None:
    """The budget's row, locked for the rest of the transaction."""
    return tx.one(
        f"SELECT * FROM budgets WHERE namespace = ? AND name = ?{tx.row_lock_suffix}",
        (namespace, name),
    )


def _usage(tx: Tx, namespace: str, name: str) -> Row:
    row = tx.one(
        "SELECT coalesce(sum(CASE WHEN state = 'held' THEN amount END), 0) AS held, "
        "count(CASE WHEN state = 'waiting' THEN 1 END) AS waiting, "
        "coalesce(sum(CASE WHEN state = 'waiting' THEN amount END), 0) AS waiting_units "
        "FROM budget_reservations WHERE namespace = ? AND budget = ?",
        (namespace, name),
    )
    assert row is not None
    return row


def describe_budget(tx: Tx, row: Row) -> Budget:
    usage = _usage(tx, row["namespace"], row["name"])
    return Budget(
        namespace=row["namespace"],
        name=row["name"],
        capacity=int(row["capacity"]),
        held=int(usage["held"]),
        waiting=int(usage["waiting"]),
        waiting_units=int(usage["waiting_units"]),
        updated_at_ms=int(row["updated_at_ms"]),
    )


def _input_event(tx: Tx, namespace: str, run_id: str, now: int, kind: str, event: Message) -> None:
    """Appends an input event to another run and wakes it (a workflow task)."""
    from durable_rpc.store._shared import append_event, ensure_workflow_task

    run = tx.one(
        f"SELECT task_queue, status FROM runs WHERE namespace = ? AND run_id = ?"
        f"{tx.row_lock_suffix}",
        (namespace, run_id),
    )
    if run is None or run["status"] != "running":
        return  # a closed run's reservations went with its close
    append_event(tx, namespace, run_id, now, kind, event)
    ensure_workflow_task(tx, namespace, run_id, run["task_queue"], now)


def grant_waiting(tx: Tx, namespace: str, name: str, now: int, deciding_run: str = "") -> None:
    """Grants the budget's waiting reservations that fit now, oldest first, stopping at
    the first that does not (FIFO). The caller locked the budget row. A grant to
    ``deciding_run`` (the run whose decision is being recorded) is one of the decision's
    input events, appended after its command events."""
    from durable_rpc.store._shared import decision_input

    budget = tx.one(
        "SELECT capacity FROM budgets WHERE namespace = ? AND name = ?", (namespace, name)
    )
    if budget is None:
        return
    free = int(budget["capacity"]) - int(_usage(tx, namespace, name)["held"])
    waiting = tx.all(
        "SELECT id, run_id, seq, amount FROM budget_reservations "
        "WHERE namespace = ? AND budget = ? AND state = 'waiting' ORDER BY id",
        (namespace, name),
    )
    for reservation in waiting:
        amount = int(reservation["amount"])
        if amount > free:
            break
        free -= amount
        tx.run(
            "UPDATE budget_reservations SET state = 'held', granted_at_ms = ? WHERE id = ?",
            (now, reservation["id"]),
        )
        event = history_pb2.BudgetReserved(seq=reservation["seq"])
        if reservation["run_id"] == deciding_run:
            decision_input(tx, namespace, deciding_run, now, "budget_reserved", event)
        else:
            _input_event(tx, namespace, reservation["run_id"], now, "budget_reserved", event)


def refuse_larger_than(tx: Tx, namespace: str, name: str, capacity: int, now: int) -> None:
    """Refuses the waiting reservations a lowered capacity can never grant (they would
    wait forever): BudgetReserveFailed with BUDGET_AMOUNT_EXCEEDS_CAPACITY."""
    rows = tx.all(
        "DELETE FROM budget_reservations WHERE namespace = ? AND budget = ? "
        "AND state = 'waiting' AND amount > ? RETURNING run_id, seq, amount",
        (namespace, name, capacity),
    )
    for row in rows:
        failed = history_pb2.BudgetReserveFailed(
            seq=row["seq"],
            reason=BUDGET_AMOUNT_EXCEEDS_CAPACITY,
            message=f"{row['amount']} units asked of budget {name!r}, whose capacity is now "
            f"{capacity}",
        )
        _input_event(tx, namespace, row["run_id"], now, "budget_reserve_failed", failed)


def reserve(
    tx: Tx, namespace: str, run_id: str, seq: int, budget: str, amount: int, now: int
) -> None:
    """A ReserveBudget command of the decision being recorded (its command event is the
    caller's): granted at once, waiting, or refused; a grant or a refusal is an input
    event of the decision."""
    from durable_rpc.store._shared import decision_input

    row = budget_row(tx, namespace, budget)
    if row is None or amount > int(row["capacity"]):
        reason, message = (
            (BUDGET_NOT_FOUND, f"namespace {namespace!r} has no budget {budget!r}")
            if row is None
            else (
                BUDGET_AMOUNT_EXCEEDS_CAPACITY,
                f"{amount} units asked of budget {budget!r}, whose capacity is {row['capacity']}",
            )
        )
        failed = history_pb2.BudgetReserveFailed(seq=seq, reason=reason, message=message)
        decision_input(tx, namespace, run_id, now, "budget_reserve_failed", failed)
        return
    tx.run(
        "INSERT INTO budget_reservations "
        "(namespace, run_id, seq, budget, amount, state, requested_at_ms) "
        "VALUES (?, ?, ?, ?, ?, 'waiting', ?)",
        (namespace, run_id, seq, budget, amount, now),
    )
    grant_waiting(tx, namespace, budget, now, deciding_run=run_id)


def release(tx: Tx, namespace: str, run_id: str, seq: int, now: int) -> None:
    """A ReleaseBudget command: the reservation (held or waiting) goes; what waits on
    its budget is granted as far as the freed units go."""
    row = tx.one(
        "SELECT budget FROM budget_reservations WHERE namespace = ? AND run_id = ? AND seq = ?",
        (namespace, run_id, seq),
    )
    if row is None:
        return  # refused, or already released: nothing is held
    budget_row(tx, namespace, row["budget"])  # the lock, before the units change
    tx.run(
        "DELETE FROM budget_reservations WHERE namespace = ? AND run_id = ? AND seq = ?",
        (namespace, run_id, seq),
    )
    grant_waiting(tx, namespace, row["budget"], now, deciding_run=run_id)


def release_run(tx: Tx, namespace: str, run_id: str, now: int) -> None:
    """The run closed while holding or waiting: every reservation of it goes, in the
    close's transaction, and the budgets it used grant their waiters."""
    budgets = tx.all(
        "SELECT DISTINCT budget FROM budget_reservations WHERE namespace = ? AND run_id = ? "
        "ORDER BY budget",
        (namespace, run_id),
    )
    for row in budgets:  # in name order: two closes lock the rows in the same order
        budget_row(tx, namespace, row["budget"])
    tx.run(
        "DELETE FROM budget_reservations WHERE namespace = ? AND run_id = ?",
        (namespace, run_id),
    )
    for row in budgets:
        grant_waiting(tx, namespace, row["budget"], now)


def waiting_reason(tx: Tx, namespace: str, run_id: str) -> str:
    """Describe's sentence for a run whose earliest waiting reservation holds it ('' when
    none waits): the budget, the amount, its capacity and what is held and waits ahead."""
    waiting = tx.one(
        "SELECT r.id, r.budget, r.amount, b.capacity FROM budget_reservations r "
        "JOIN budgets b ON b.namespace = r.namespace AND b.name = r.budget "
        "WHERE r.namespace = ? AND r.run_id = ? AND r.state = 'waiting' ORDER BY r.id LIMIT 1",
        (namespace, run_id),
    )
    if waiting is None:
        return ""
    held = _usage(tx, namespace, waiting["budget"])["held"]
    ahead = int(
        tx.value(
            "SELECT count(*) FROM budget_reservations WHERE namespace = ? AND budget = ? "
            "AND state = 'waiting' AND id < ?",
            (namespace, waiting["budget"], waiting["id"]),
        )
    )
    queue = (
        ""
        if not ahead
        else "; 1 earlier reservation waits before it"
        if ahead == 1
        else f"; {ahead} earlier reservations wait before it"
    )
    return (
        f"Waiting for budget {waiting['budget']} ({waiting['amount']} of "
        f"{waiting['capacity']}; {held} held{queue})."
    )
