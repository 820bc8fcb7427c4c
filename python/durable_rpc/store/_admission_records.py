"""What a namespace's admission policy reads as (``_admission`` enforces it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Admission:
    """A namespace's admission policy and its state."""

    namespace: str
    #: Open runs admitted at once (None: no limit).
    max_open_runs: int | None
    #: Starts admitted per ``period_ms`` (None: no rate), a token bucket of that size.
    starts_per_period: int | None
    period_ms: int | None
    #: ``queue`` (a start over the limit waits, not yet admitted) or ``refuse``.
    over_limit: str
    updated_at_ms: int
    #: Admitted open runs of one concurrency key at once (None: keys are not limited),
    #: and what a start over it gets: ``queue``, ``cancel_newest`` or ``cancel_oldest``.
    max_per_key: int | None = None
    key_strategy: str = "queue"
    #: Filled by ``describe``: admitted open runs and runs waiting for admission.
    open_runs: int = 0
    waiting_runs: int = 0
