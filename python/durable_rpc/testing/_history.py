"""Loading a history from whatever form a user has: a message, bytes, JSON or a path.

The JSON form is what ``durable-rpc workflow history --export FILE`` writes (protobuf
JSON of a ``History``); the binary form is the serialized message.
"""

from __future__ import annotations

import os
from pathlib import Path

from google.protobuf import json_format
from google.protobuf.message import DecodeError

from durable_rpc.v1 import history_pb2

#: Anything :func:`load_history` accepts.
HistoryLike = history_pb2.History | bytes | str | os.PathLike[str]


def load_history(history: HistoryLike) -> history_pb2.History:
    """A ``History`` from a message, its serialized bytes, protobuf JSON text or bytes, or
    a path to a ``.json`` / ``.pb`` file.

    A ``str`` that starts with ``{`` is JSON text; any other ``str`` is a path.
    """
    if isinstance(history, history_pb2.History):
        return history
    if isinstance(history, os.PathLike):
        return _from_bytes(Path(history).read_bytes())
    if isinstance(history, str):
        if history.lstrip().startswith("{"):
            return json_format.Parse(history, history_pb2.History())
        return _from_bytes(Path(history).read_bytes())
    return _from_bytes(history)


def _from_bytes(data: bytes) -> history_pb2.History:
    # Protobuf JSON always starts with '{'; a serialized History starts with a field tag
    # (0x0a for `events`), so the first non-blank byte tells the formats apart.
    if data.lstrip()[:1] == b"{":
        return json_format.Parse(data.decode("utf-8"), history_pb2.History())
    try:
        return history_pb2.History.FromString(data)
    except DecodeError as exc:
        raise ValueError(f"not a History (protobuf JSON or binary): {exc}") from exc
