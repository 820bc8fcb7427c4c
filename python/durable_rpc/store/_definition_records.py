"""The record of ListDefinitions / RemoveDefinition / RestoreDefinition (``_ops_definitions``),
and what a registering worker says about a definition's fingerprint
(``_definition_fingerprints``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from durable_rpc.fingerprint_algorithms import UNNAMED


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


@dataclass(frozen=True, slots=True)
class CodeFingerprints:
    """What a worker says about one definition's fingerprint beyond its value: the
    algorithm that made it ('' when the worker names none) and the same code's
    fingerprints under earlier algorithms, by algorithm."""

    algorithm: str = ""
    legacy: Mapping[str, str] = field(default_factory=dict)

    @property
    def recorded_algorithm(self) -> str:
        return self.algorithm or UNNAMED

    def under(self, algorithm: str, value: str) -> str | None:
        """The worker's fingerprint under ``algorithm`` (``value`` is its current one)."""
        if algorithm == self.recorded_algorithm:
            return value
        return self.legacy.get(algorithm)
