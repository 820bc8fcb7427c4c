"""The channel a client talks through: address, TLS (and mTLS) and the API key.

Everything has an environment variable, so one program runs unchanged in development and
production: ``DURABLE_RPC_ADDRESS``, ``DURABLE_RPC_API_KEY``, ``DURABLE_RPC_TLS_CA``,
``DURABLE_RPC_TLS_CERT``, ``DURABLE_RPC_TLS_KEY``, ``DURABLE_RPC_TLS_SERVER_NAME``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from durable_rpc._channel_wrapper import ChannelWrapper

#: PEM bytes, or the path of a PEM file.
Pem = bytes | str | Path

_ENV_CA = "DURABLE_RPC_TLS_CA"
_ENV_CERT = "DURABLE_RPC_TLS_CERT"
_ENV_KEY = "DURABLE_RPC_TLS_KEY"
_ENV_SERVER_NAME = "DURABLE_RPC_TLS_SERVER_NAME"
ENV_API_KEY = "DURABLE_RPC_API_KEY"


@dataclass(frozen=True)
class TLSConfig:
    """TLS to the server. ``ca_cert``: the CA that signed the server's certificate
    (None: the system's roots). ``client_cert`` and ``client_key``: this client's
    certificate, for a server that requires mTLS. ``server_name``: the name to verify the
    server's certificate against, when it differs from the address's host."""

    ca_cert: Pem | None = None
    client_cert: Pem | None = None
    client_key: Pem | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.client_cert is None) != (self.client_key is None):
            raise ValueError("TLSConfig: client_cert and client_key go together")

    @classmethod
    def from_env(cls) -> TLSConfig | None:
        """From the DURABLE_RPC_TLS_* variables (None when none is set: no TLS)."""
        names = (_ENV_CA, _ENV_CERT, _ENV_KEY, _ENV_SERVER_NAME)
        if not any(os.environ.get(n) for n in names):
            return None
        return cls(
            ca_cert=os.environ.get(_ENV_CA) or None,
            client_cert=os.environ.get(_ENV_CERT) or None,
            client_key=os.environ.get(_ENV_KEY) or None,
            server_name=os.environ.get(_ENV_SERVER_NAME) or None,
        )

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca_cert),
            private_key=_read(self.client_key),
            certificate_chain=_read(self.client_cert),
        )


def _read(pem: Pem | None) -> bytes | None:
    if pem is None or isinstance(pem, bytes):
        return pem
    return Path(pem).expanduser().read_bytes()


def open_channel(
    address: str,
    *,
    tls: TLSConfig | None,
    api_key: str | None,
    options: Sequence[tuple[str, Any]],
) -> grpc.aio.Channel:
    """A channel to ``address``, over TLS when ``tls`` is given, whose every call carries
    ``authorization: Bearer <api_key>`` when a key is given."""
    if tls is None:
        channel = grpc.aio.insecure_channel(address, options=list(options))
    else:
        extra = [("grpc.ssl_target_name_override", tls.server_name)] if tls.server_name else []
        channel = grpc.aio.secure_channel(address, tls.credentials(), options=[*options, *extra])
    return channel if not api_key else KeyedChannel(channel, api_key)


class KeyedChannel(ChannelWrapper):
    """A channel whose calls carry the API key as metadata.

    Plain metadata rather than grpc call credentials: call credentials need a secure
    channel (a development server with ``--auth`` listens in plain text on loopback) and
    run a plugin thread hop on every call; this is one tuple added per call.
    """

    def __init__(self, channel: grpc.aio.Channel, api_key: str) -> None:
        super().__init__(channel)
        self._authorization = ("authorization", f"Bearer {api_key}")

    def _keyed(self, inner: Any) -> Any:
        authorization = self._authorization

        def call(request: Any, *, metadata: Iterable[tuple[str, Any]] | None = None, **kw: Any):  # type: ignore[no-untyped-def]
            kept = [m for m in metadata or () if m[0] != "authorization"]
            return inner(request, metadata=(*kept, authorization), **kw)

        return call

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._keyed(self.channel.unary_unary(method, *args, **kwargs))

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._keyed(self.channel.unary_stream(method, *args, **kwargs))

    def stream_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._keyed(self.channel.stream_unary(method, *args, **kwargs))

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._keyed(self.channel.stream_stream(method, *args, **kwargs))
