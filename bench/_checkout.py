"""Makes a benchmark measure the checkout it lives in.

When this checkout's ``python/`` holds a built package (its compiled ``_core``, as
``pip install -e .`` or ``maturin develop`` leave it), that directory goes first on
``sys.path`` and on the ``PYTHONPATH`` of every process the benchmark starts. Without it,
a benchmark run from a second worktree (an older commit, for an A/B comparison) would
silently measure whatever package is installed. A checkout without a built ``_core``
(``pip install .``) measures the installed package. Import this before ``durable_rpc``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "python"
BUILT = any(path.suffix in (".so", ".pyd") for path in (SOURCE / "durable_rpc").glob("_core.*"))

if BUILT and str(SOURCE) not in sys.path:
    sys.path.insert(0, str(SOURCE))


def child_env() -> dict[str, str]:
    """The environment of a process the benchmark starts (server, worker)."""
    paths = [str(SOURCE)] if BUILT else []
    paths.append(str(ROOT))
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
