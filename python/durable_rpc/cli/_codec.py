"""Payloads a codec encoded, as the CLI shows them (docs/engine.md, "Payload codecs").

What needs no key is undone (compression). Encrypted payloads are decrypted with the
keys the operator gave the CLI in a key file named by ``$DURABLE_RPC_CODEC_KEYS_FILE``
(``operator_keys``), and shown as ``<encrypted: key k1>`` when their key is not there,
instead of failing to decode (``durable_rpc.codec.readable``, shared with the web UI):
directly for the history views, which render payloads themselves (reading them
``AsStored``, so an export keeps the ciphertext a holder of the key can replay), and
``ShownCodec`` for the commands that read values through the SDK (result, describe's
memo, query, update), which it replaces with that text as a plain string frame.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import os
from collections.abc import Sequence

import click

from durable_rpc import converter
from durable_rpc.codec import AesGcmCodec, readable
from durable_rpc.v1.payload_pb2 import Payload

#: Names a JSON file of the keys the CLI decrypts with: {"key id": "<base64 of 32 bytes>"}.
#: A file, not the keys themselves, so no key is in an argument list or a shell history.
KEYS_FILE_ENV = "DURABLE_RPC_CODEC_KEYS_FILE"


@functools.cache
def operator_keys() -> AesGcmCodec | None:
    """The codec holding the key file's keys (read once), or None without one. A file
    that cannot be used stops the command with a message naming the file and what is
    wrong, never a key's bytes."""
    path = os.environ.get(KEYS_FILE_ENV)
    if not path:
        return None

    def refuse(why: str) -> click.ClickException:
        return click.ClickException(f"${KEYS_FILE_ENV} ({path}): {why}")

    try:
        with open(path, encoding="utf-8") as file:
            entries = json.load(file)
    except OSError as exc:
        raise refuse(f"cannot be read ({exc.strerror})") from None
    except (ValueError, UnicodeDecodeError):
        raise refuse('is not JSON: expected {"key id": "<base64 of 32 bytes>", ...}') from None
    if not isinstance(entries, dict) or not entries:
        raise refuse('expected a non-empty object {"key id": "<base64 of 32 bytes>", ...}')
    keys: dict[str, bytes] = {}
    for key_id, text in entries.items():
        try:
            keys[key_id] = base64.b64decode(str(text), validate=True)
        except (binascii.Error, ValueError):
            raise refuse(f"the key of {key_id!r} is not base64") from None
    try:
        return AesGcmCodec(keys=keys, encrypt_with=next(iter(keys)))
    except ValueError as exc:  # the message names a key id and the size, not the key
        raise refuse(str(exc)) from None


class ShownCodec:
    """Sends payloads as they are; receives each encoded one as its ``readable`` form,
    decrypted with the operator's keys where it can be."""

    def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = []
        for p in payloads:
            shown = readable(p, decrypt=operator_keys())
            out.append(Payload(data=converter.encode(shown)) if isinstance(shown, str) else shown)
        return out


class AsStored:
    """Payloads as the server keeps them, encoded ones included."""

    def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)
