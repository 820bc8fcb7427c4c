"""Shared test configuration."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The interop files live beside the project (../shared/interop); CI lays them there too.
INTEROP = Path(os.environ.get("DURABLE_RPC_INTEROP_DIR", ROOT.parent / "shared" / "interop"))


@pytest.fixture(scope="session")
def interop_dir() -> Path:
    if not (INTEROP / "golden-avro-value-v1.json").is_file():
        pytest.fail(f"interop golden files not found in {INTEROP}; set DURABLE_RPC_INTEROP_DIR")
    return INTEROP
