"""Removed definitions (RemoveDefinition): what refuses them and what it says."""

from __future__ import annotations

from durable_rpc.store._tx import Tx


def removed_message(name: str, version: str, refused: str) -> str:
    """Why a removed definition is refused (registration, a new run), and the way back."""
    return (
        f"workflow ({name!r}, version {version!r}) was removed by an operator, so it "
        f"cannot be {refused} until it is restored: durable-rpc definition restore "
        f"{name} --version {version}"
    )


def definition_removed(tx: Tx, namespace: str, name: str, version: str) -> bool:
    """Whether an operator removed (name, version) (and did not restore it)."""
    removed = tx.value(
        "SELECT removed_at_ms FROM definitions WHERE namespace = ? AND name = ? AND version = ?",
        (namespace, name, version),
    )
    return removed is not None
