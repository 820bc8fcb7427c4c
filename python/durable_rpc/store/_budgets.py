"""Namespace budgets (``workflow.reserve()``): the store side, inside the transactions
that record decisions and close runs.

A budget is a row of ``budgets`` (namespace, name, capacity). A reservation is a row of
``budget_reservations``: ``held`` (its units are taken) or ``waiting`` (FIFO by ``id``).
The rule: the units held by a budget's reservations never exceed its capacity; a
reservation is granted when its amount fits in what is free *and* no reservation of the
budget waits before it (strict FIFO, so a large reservation is never starved by small
ones). A release returns the units at once, unless the budget has a **refill** rate
(``refill_units`` per ``refill_period_ms``: a budget of tokens per minute, say): then the
released units are *spent* and come back at that rate, so work cannot recycle a budget
faster than its rate. Spent units are one number per budget, ``debt`` as of
``debt_at_ms``, settled lazily (``settled``: whole units, on the database clock); a
waiting reservation that only spent units hold back is granted by the due pass at
``next_grant_ms``, the moment enough have come back. Every change that may free units (a
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
from durable_rpc.store._dialects import Dialect
from durable_rpc.store._shared import append_event, decision_input, ensure_workflow_task
from durable_rpc.store._tx import Row, Tx
from durable_rpc.v1 import history_pb2

#: The stable reasons of a refused reservation (BudgetReserveFailed.reason).
BUDGET_NOT_FOUND = "BUDGET_NOT_FOUND"
BUDGET_AMOUNT_EXCEEDS_CAPACITY = "BUDGET_AMOUNT_EXCEEDS_CAPACITY"
#: A capacity above this is a mistake (and keeps sums far from 64-bit overflow).
MAX_CAPACITY = 10**15
#: The longest refill period: a budget that refills slower than a unit a month is a
#: capacity, not a rate.
MAX_REFILL_PERIOD_MS = 31 * 24 * 3600 * 1000


def budget_refill_columns(d: Dialect) -> tuple[str, ...]:
    """The refill migration: a budget's rate and its spent units (``settled``)."""
    return (
        f"ALTER TABLE budgets ADD COLUMN refill_units {d.bigint} NOT NULL DEFAULT 0",
        f"ALTER TABLE budgets ADD COLUMN refill_period_ms {d.bigint} NOT NULL DEFAULT 0",
        f"ALTER TABLE budgets ADD COLUMN debt {d.bigint} NOT NULL DEFAULT 0",
        f"ALTER TABLE budgets ADD COLUMN debt_at_ms {d.bigint} NOT NULL DEFAULT 0",
        f"ALTER TABLE budgets ADD COLUMN next_grant_ms {d.bigint}",
        "CREATE INDEX budgets_next_grant ON budgets (next_grant_ms) "
        "WHERE next_grant_ms IS NOT NULL",
    )


def check_refill(refill_units: int, refill_period_ms: int) -> None:
    """No refill (both 0), or a whole number of units per period."""
    if refill_units == 0 and refill_period_ms == 0:
        return
    if not 1 <= refill_units <= MAX_CAPACITY or not 1 <= refill_period_ms <= MAX_REFILL_PERIOD_MS:
        raise InvalidArgumentError(
            f"a budget's refill must be 1 to {MAX_CAPACITY} units per 1 ms to "
            f"{MAX_REFILL_PERIOD_MS} ms (or both 0: released units return at once), got "
            f"{refill_units} per {refill_period_ms} ms"
        )


def settled(row: Row, now: int) -> tuple[int, int]:
    """The budget's spent units still coming back at ``now``, and the time that count is
    as of: whole units come back, the remainder of a unit's time is kept (never early)."""
    debt, at = int(row["debt"]), int(row["debt_at_ms"])
    units, period = int(row["refill_units"]), int(row["refill_period_ms"])
    if debt == 0 or units == 0:
        return 0, now
    back = (now - at) * units // period
    if back >= debt:
        return 0, now
    return debt - back, at + -(-back * period // units)


def budget_tables(d: Dialect) -> tuple[str, ...]:
    """The budgets migration's tables (same shape on both backends)."""
    return (
        f"""CREATE TABLE budgets (
            namespace TEXT NOT NULL,
            name TEXT NOT NULL,
            capacity {d.bigint} NOT NULL CHECK (capacity > 0),
            updated_at_ms {d.bigint} NOT NULL,
            PRIMARY KEY (namespace, name)
        )""",
        f"""CREATE TABLE budget_reservations (
            id {d.identity},
            namespace TEXT NOT NULL,
            run_id TEXT NOT NULL,
            seq {d.bigint} NOT NULL,
            budget TEXT NOT NULL,
            amount {d.bigint} NOT NULL CHECK (amount > 0),
            state TEXT NOT NULL,
            requested_at_ms {d.bigint} NOT NULL,
            granted_at_ms {d.bigint},
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
    spent, _ = settled(row, tx.now_ms())
    return Budget(
        namespace=row["namespace"],
        name=row["name"],
        capacity=int(row["capacity"]),
        held=int(usage["held"]),
        waiting=int(usage["waiting"]),
        waiting_units=int(usage["waiting_units"]),
        updated_at_ms=int(row["updated_at_ms"]),
        refill_units=int(row["refill_units"]),
        refill_period_ms=int(row["refill_period_ms"]),
        refilling=spent,
    )


def _input_event(tx: Tx, namespace: str, run_id: str, now: int, kind: str, event: Message) -> None:
    """Appends an input event to another run and wakes it (a workflow task)."""
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
    budget = tx.one("SELECT * FROM budgets WHERE namespace = ? AND name = ?", (namespace, name))
    if budget is None:
        return
    spent, spent_at = settled(budget, now)
    held = int(_usage(tx, namespace, name)["held"])
    free = int(budget["capacity"]) - held - spent
    waiting = tx.all(
        "SELECT id, run_id, seq, amount FROM budget_reservations "
        "WHERE namespace = ? AND budget = ? AND state = 'waiting' ORDER BY id",
        (namespace, name),
    )
    head: int | None = None  # the amount of the first reservation left waiting
    for reservation in waiting:
        amount = int(reservation["amount"])
        if amount > free:
            head = amount
            break
        free -= amount
        held += amount
        tx.run(
            "UPDATE budget_reservations SET state = 'held', granted_at_ms = ? WHERE id = ?",
            (now, reservation["id"]),
        )
        event = history_pb2.BudgetReserved(seq=reservation["seq"])
        if reservation["run_id"] == deciding_run:
            decision_input(tx, namespace, deciding_run, now, "budget_reserved", event)
        else:
            _input_event(tx, namespace, reservation["run_id"], now, "budget_reserved", event)
    if int(budget["refill_units"]):
        _settle(tx, budget, spent, spent_at, _grant_time(budget, spent, spent_at, held, head))


def _grant_time(budget: Row, spent: int, spent_at: int, held: int, head: int | None) -> int | None:
    """When the head waiter fits, if only spent units hold it back (None: nothing waits,
    or it needs held units released, which grant it themselves)."""
    if head is None:
        return None
    short = spent - (int(budget["capacity"]) - held - head)  # units to come back first
    if short <= 0 or short > spent:
        return None
    units, period = int(budget["refill_units"]), int(budget["refill_period_ms"])
    # The first time at which ``(t - spent_at) * units // period >= short``.
    return spent_at + -(-short * period // units)


def _settle(tx: Tx, budget: Row, spent: int, spent_at: int, grant_at: int | None) -> None:
    tx.run(
        "UPDATE budgets SET debt = ?, debt_at_ms = ?, next_grant_ms = ? "
        "WHERE namespace = ? AND name = ?",
        (spent, spent_at, grant_at, budget["namespace"], budget["name"]),
    )
    if grant_at is not None:
        tx.notes.due.add(grant_at)


def _spend(tx: Tx, namespace: str, name: str, units: int, now: int) -> None:
    """Released held units of a refilling budget are spent: they come back at its rate.
    The caller locked the budget row."""
    budget = tx.one("SELECT * FROM budgets WHERE namespace = ? AND name = ?", (namespace, name))
    if budget is None or not int(budget["refill_units"]) or units <= 0:
        return
    spent, spent_at = settled(budget, now)
    tx.run(
        "UPDATE budgets SET debt = ?, debt_at_ms = ? WHERE namespace = ? AND name = ?",
        (spent + units, spent_at, namespace, name),
    )


def grant_due(tx: Tx, now: int) -> None:
    """The due pass: budgets whose head waiter fits now that spent units came back."""
    due = tx.all(
        "SELECT namespace, name FROM budgets WHERE next_grant_ms IS NOT NULL "
        "AND next_grant_ms <= ? ORDER BY namespace, name",
        (now,),
    )
    for row in due:
        budget_row(tx, row["namespace"], row["name"])  # the lock: once across replicas
        grant_waiting(tx, row["namespace"], row["name"], now)


def next_grant_ms(tx: Tx) -> int | None:
    value = tx.value("SELECT MIN(next_grant_ms) AS m FROM budgets WHERE next_grant_ms IS NOT NULL")
    return None if value is None else int(value)


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
        "SELECT budget, amount, state FROM budget_reservations "
        "WHERE namespace = ? AND run_id = ? AND seq = ?",
        (namespace, run_id, seq),
    )
    if row is None:
        return  # refused, or already released: nothing is held
    budget_row(tx, namespace, row["budget"])  # the lock, before the units change
    if row["state"] == "held":
        _spend(tx, namespace, row["budget"], int(row["amount"]), now)
    tx.run(
        "DELETE FROM budget_reservations WHERE namespace = ? AND run_id = ? AND seq = ?",
        (namespace, run_id, seq),
    )
    grant_waiting(tx, namespace, row["budget"], now, deciding_run=run_id)


def release_run(tx: Tx, namespace: str, run_id: str, now: int) -> None:
    """The run closed while holding or waiting: every reservation of it goes, in the
    close's transaction, and the budgets it used grant their waiters."""
    budgets = tx.all(
        "SELECT budget, coalesce(sum(CASE WHEN state = 'held' THEN amount END), 0) AS held "
        "FROM budget_reservations WHERE namespace = ? AND run_id = ? "
        "GROUP BY budget ORDER BY budget",
        (namespace, run_id),
    )
    for row in budgets:  # in name order: two closes lock the rows in the same order
        budget_row(tx, namespace, row["budget"])
        _spend(tx, namespace, row["budget"], int(row["held"]), now)
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
