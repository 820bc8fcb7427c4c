"""The record of ListDefinitions / RemoveDefinition / RestoreDefinition (``_ops_definitions``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DefinitionRecord:
    """A workflow definition (name, version, fingerprint) and what references it."""

    name: str
    version: str
    fingerprint: str
    registered_at_ms: int
    #: Set by RemoveDefinition (registration and new starts refused until restored).
    removed_at_ms: int | None
    #: The live workers registering it, by id.
    live_worker_ids: tuple[str, ...]
    #: Open runs of it by the state of their workflow task: queued (due, not leased),
    #: leased (lease live), recoverable (lease expired), waiting (none due).
    queued_runs: int
    leased_runs: int
    recoverable_runs: int
    waiting_runs: int
    #: Failed runs still kept (informational: a redrive needs the definition).
    failed_runs: int

    @property
    def open_runs(self) -> int:
        return self.queued_runs + self.leased_runs + self.recoverable_runs + self.waiting_runs
