"""What one transaction appended to run histories, and what of it is not written yet.

Pure bookkeeping, no I/O: ``Tx`` reads the lengths it lacks and writes what
``take_unwritten`` hands it. Keeping every appended event (not just the unwritten ones)
lets a transaction answer questions about its own appends without a query.
"""

from __future__ import annotations

from dataclasses import dataclass

#: (namespace, run id)
RunKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class AppendedEvent:
    namespace: str
    run_id: str
    event_id: int
    kind: str
    time_ms: int
    data: bytes

    @property
    def row(self) -> tuple[str, str, int, str, int, bytes]:
        """The history row, in the column order of ``INSERT INTO history``."""
        return (self.namespace, self.run_id, self.event_id, self.kind, self.time_ms, self.data)


class HistoryBuffer:
    def __init__(self) -> None:
        # Each run's history length in this transaction, appends included.
        self._lengths: dict[RunKey, int] = {}
        # Each run's length before this transaction appended to it.
        self._bases: dict[RunKey, int] = {}
        # Each run's history size in bytes in this transaction, appends included.
        self._sizes: dict[RunKey, int] = {}
        self.events: list[AppendedEvent] = []
        self._written = 0  # events[:_written] are in the database

    def known_length(self, key: RunKey) -> int | None:
        return self._lengths.get(key)

    def remember(self, key: RunKey, length: int, size_bytes: int) -> None:
        """The run's stored length and size, read by this transaction (after its appends
        were written, so they include them)."""
        self._lengths[key] = length
        self._sizes[key] = size_bytes
        self._bases.setdefault(key, length)

    def totals(self, key: RunKey) -> tuple[int, int] | None:
        """The run's (length, size in bytes) with this transaction's appends; None when
        this transaction has not read them."""
        length = self._lengths.get(key)
        return None if length is None else (length, self._sizes[key])

    def reserve(self, key: RunKey) -> int:
        """The run's next event id; its length must be known."""
        self._lengths[key] += 1
        return self._lengths[key]

    def add(self, event: AppendedEvent) -> None:
        self.events.append(event)
        self._sizes[(event.namespace, event.run_id)] += len(event.data)

    @property
    def has_unwritten(self) -> bool:
        return self._written < len(self.events)

    def take_unwritten(self) -> list[tuple[RunKey, int, int, list[AppendedEvent]]]:
        """The events not written yet, per run in order of first append, with the run's
        length and size to store; from now on they count as written."""
        by_run: dict[RunKey, list[AppendedEvent]] = {}
        for event in self.events[self._written :]:
            by_run.setdefault((event.namespace, event.run_id), []).append(event)
        self._written = len(self.events)
        return [
            (key, self._lengths[key], self._sizes[key], events) for key, events in by_run.items()
        ]

    def appended_after(self, key: RunKey, event_id: int, kinds: tuple[str, ...]) -> bool | None:
        """Whether the run has an event of ``kinds`` after ``event_id``, when every event
        this transaction did not append is at most ``event_id``; None when only the
        database can tell."""
        base = self._bases.get(key)
        if base is None or base > event_id:
            return None
        return any(
            (e.namespace, e.run_id) == key and e.event_id > event_id and e.kind in kinds
            for e in self.events
        )

    def whole_history(self, key: RunKey) -> list[bytes] | None:
        """The run's serialized events when this transaction appended all of them (it
        created the run); None otherwise."""
        if self._bases.get(key) != 0:
            return None
        return [e.data for e in self.events if (e.namespace, e.run_id) == key]
