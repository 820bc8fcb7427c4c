"""A ``grpc.aio.Channel`` that hands everything to the channel it wraps.

The client's channel wrappers (tracing, the API key) subclass it and override only the
call kinds they change: wrapping a channel costs one Python call per RPC, where grpc's
client interceptors add tasks to every call.
"""

from __future__ import annotations

from typing import Any

import grpc


class ChannelWrapper(grpc.aio.Channel):  # type: ignore[misc]
    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.channel = channel

    async def __aenter__(self) -> ChannelWrapper:
        return self

    async def __aexit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        await self.channel.__aexit__(exc_type, exc_val, exc_tb)

    async def close(self, grace: float | None = None) -> None:
        await self.channel.close(grace)

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return self.channel.get_state(try_to_connect)

    async def wait_for_state_change(self, last_observed_state: grpc.ChannelConnectivity) -> None:
        await self.channel.wait_for_state_change(last_observed_state)

    async def channel_ready(self) -> None:
        await self.channel.channel_ready()

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self.channel.unary_unary(method, *args, **kwargs)

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self.channel.unary_stream(method, *args, **kwargs)

    def stream_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self.channel.stream_unary(method, *args, **kwargs)

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self.channel.stream_stream(method, *args, **kwargs)
