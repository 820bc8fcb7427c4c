"""A key's lifetime is bounded: its expiry is answered as a Timestamp (which ends at the
year 9999), so a lifetime past the bound is refused before the key is stored, and the
listing of keys keeps working."""

from __future__ import annotations

import pytest
from google.protobuf import duration_pb2

from durable_rpc import Client
from durable_rpc.errors import InvalidArgumentError
from durable_rpc.store._ops_admin import MAX_KEY_LIFETIME_MS
from durable_rpc.v1 import admin_service_pb2 as admin_pb
from tests.security.conftest import AuthServer

#: The longest Duration the API accepts: 10,000 years.
LONGEST_DURATION_S = 315_576_000_000


async def test_a_lifetime_past_the_bound_is_refused_and_keys_stay_listable(
    auth_server: AuthServer,
) -> None:
    root_secret: str = auth_server.root_key  # type: ignore[attr-defined]
    async with await Client.connect(auth_server.address, api_key=root_secret) as root:
        for seconds in (LONGEST_DURATION_S, MAX_KEY_LIFETIME_MS // 1000 + 1):
            request = admin_pb.CreateApiKeyRequest(
                role="admin", name="forever", expires_in=duration_pb2.Duration(seconds=seconds)
            )
            with pytest.raises(InvalidArgumentError, match="expires_in must be at most"):
                await root.call(root.admin_service.CreateApiKey, request)
        longest = admin_pb.CreateApiKeyRequest(
            role="admin",
            name="longest",
            expires_in=duration_pb2.Duration(seconds=MAX_KEY_LIFETIME_MS // 1000),
        )
        await root.call(root.admin_service.CreateApiKey, longest)
        listed = await root.call(root.admin_service.ListApiKeys, admin_pb.ListApiKeysRequest())
        names = [key.name for key in listed.keys]
        assert "longest" in names
        assert "forever" not in names
    assert "Traceback" not in auth_server.log_path.read_text()
