"""Shared test configuration."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The interop files are shared with the Durable Workflow SDKs and live beside the project
# (../shared/interop). A checkout on its own uses the copy in tests/fixtures/interop, which
# tests/codec/test_golden.py checks is byte for byte the shared one whenever both exist.
SHARED_INTEROP = ROOT.parent / "shared" / "interop"
VENDORED_INTEROP = ROOT / "tests" / "fixtures" / "interop"
INTEROP = Path(
    os.environ.get(
        "DURABLE_RPC_INTEROP_DIR",
        SHARED_INTEROP
        if (SHARED_INTEROP / "golden-avro-value-v1.json").is_file()
        else VENDORED_INTEROP,
    )
)


@pytest.fixture(scope="session")
def interop_dir() -> Path:
    if not (INTEROP / "golden-avro-value-v1.json").is_file():
        pytest.fail(f"interop golden files not found in {INTEROP}; set DURABLE_RPC_INTEROP_DIR")
    return INTEROP
