"""Database times in the sentences the store writes for people (why a run is stuck)."""

from __future__ import annotations

import datetime as dt


def db_time_text(ms: int) -> str:
    """A database time (epoch ms) as ISO 8601 UTC, to the millisecond."""
    moment = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
