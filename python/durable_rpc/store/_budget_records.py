"""What the store returns about a namespace budget (``_budgets``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Budget:
    namespace: str
    name: str
    #: Units open reservations may hold at once.
    capacity: int
    #: Units held now by granted reservations.
    held: int
    #: Reservations waiting (FIFO) and the units they ask for.
    waiting: int
    waiting_units: int
    updated_at_ms: int
    #: Released units come back at refill_units per refill_period_ms (0, 0: at once).
    refill_units: int = 0
    refill_period_ms: int = 0
    #: Released units not back yet (only with a refill).
    refilling: int = 0
