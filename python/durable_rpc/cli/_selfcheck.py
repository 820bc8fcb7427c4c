"""``durable-rpc selfcheck``: prove the native core loads and speaks the interop format."""

from __future__ import annotations

import click

from durable_rpc import payload

SAMPLE = {"order": 42, "items": ["a", "b"], "total": 9.5, "paid": True, "note": None}


@click.command()
def selfcheck() -> None:
    """Round-trip a sample value through the Rust Avro codec and print the frame."""
    frame = payload.encode(SAMPLE)
    if payload.decode(frame) != SAMPLE:
        raise click.ClickException("codec round trip changed the value")
    fingerprint = payload.VALUE_SCHEMA_FINGERPRINT.hex()
    click.echo(f"codec ok: schema fingerprint {fingerprint}, {len(frame)}-byte frame")
    click.echo(f"frame: {frame.hex()}")
