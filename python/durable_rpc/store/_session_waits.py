"""Describe's "why is it stuck" for an activity that runs in a worker session: it can be
claimable by time and type and still wait, because only the session's live holder, or a
worker that may enter the session (``_sessions.may_enter``: sessions registered, the
capabilities its options require, a free session slot), claims it."""

from __future__ import annotations

import json
from collections.abc import Collection

from durable_rpc.store._sessions import is_live, may_enter, running_count, worker_config
from durable_rpc.store._time_text import db_time_text
from durable_rpc.store._tx import Row, Tx


def waiting_reason(
    tx: Tx, namespace: str, activity: Row, workers: Collection[str], now: int
) -> str:
    """Why no worker claims ``activity`` (claimable, ``session_id`` set) now; '' when one
    of ``workers`` (live on its task queue, registering its type) may enter the session.
    The text follows "Waiting for activity 'x' (seq n): "."""
    session = tx.one(
        "SELECT * FROM worker_sessions WHERE namespace = ? AND session_id = ?",
        (namespace, activity["session_id"]),
    )
    if session is None:
        return ""  # scheduling creates the row; without one nothing holds the activity back
    for worker_id in workers:
        config = worker_config(tx, namespace, worker_id)
        if config is not None and may_enter(tx, session, worker_id, config, now):
            return ""
    name = f"session {session['session_id']!r}"
    if is_live(session, now):
        held = (
            f"it runs in {name}, held by worker {session['holder']!r} until "
            f"{db_time_text(session['lease_expires_ms'])}"
        )
        limit = int(session["max_activities"])
        running = running_count(tx, namespace, session["session_id"], now)
        if limit and running >= limit:
            return f"{held}, which runs its limit of {limit} concurrent activities."
        return f"{held}, which does not take it (it is not live or does not register it)."
    requires = json.loads(session["requires"])
    needs = ", ".join(f"{key}={value}" for key, value in sorted(requires.items()))
    with_caps = f" with capabilities {needs}" if needs else ""
    if session["state"] == "pending":
        state = "not yet held"
    else:
        lapsed = db_time_text(session["lease_expires_ms"])
        state = f"its holder {session['holder']!r} lost it at {lapsed}"
    return (
        f"it runs in {name} ({state}), which no live worker on task queue "
        f"{activity['task_queue']!r} may enter: start one with worker sessions{with_caps} "
        "that registers the activity and has a free session slot."
    )
