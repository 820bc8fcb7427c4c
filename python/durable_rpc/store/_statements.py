"""The raw statements of an open transaction, beneath ``Tx``'s buffered history appends.

What ``Tx`` runs while it writes its own buffer (``_payloads.record_refs``, from
``Tx.flush_events``) is written against this surface alone, so it sits below ``_tx``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class RawStatements(Protocol):
    """Statements executed as they come: no history buffer is flushed first."""

    #: See ``Tx.row_lock_suffix``.
    row_lock_suffix: str

    def _fetch(self, sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        """Executes a statement; returns its rows."""

    def _execute(self, sql: str, params: Sequence[Any]) -> int:
        """Executes a statement; returns the number of rows it changed."""
