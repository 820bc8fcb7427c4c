"""The ``postgresql://`` store URL: libpq's part, the store's own parameters, and the URL
as it may be shown (password hidden)."""

from __future__ import annotations

import urllib.parse

from durable_rpc.errors import InvalidArgumentError

#: Store parameters accepted in the URL's query string (the rest goes to libpq).
_OWN_PARAMS = ("pool_size", "acquire_timeout", "hot_path")
DEFAULT_POOL_SIZE = 10
DEFAULT_ACQUIRE_TIMEOUT_S = 5.0


def parse_url(url: str) -> tuple[str, int, float]:
    """(libpq URL, pool size, acquire timeout) from a ``postgresql://`` URL."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in query if k in _OWN_PARAMS}
    rest = [(k, v) for k, v in query if k not in _OWN_PARAMS]
    try:
        pool_size = int(own.get("pool_size", DEFAULT_POOL_SIZE))
        acquire_timeout = float(own.get("acquire_timeout", DEFAULT_ACQUIRE_TIMEOUT_S))
    except ValueError as exc:
        raise InvalidArgumentError(f"invalid store parameter in {redact(url)!r}: {exc}") from exc
    if pool_size < 1 or acquire_timeout <= 0:
        raise InvalidArgumentError(
            f"pool_size and acquire_timeout must be positive: {redact(url)!r}"
        )
    conninfo = urllib.parse.urlunsplit(
        parts._replace(query=urllib.parse.urlencode(rest, quote_via=urllib.parse.quote))
    )
    return conninfo, pool_size, acquire_timeout


def hot_path_enabled(url: str) -> bool:
    """The ``hot_path`` URL parameter: ``on`` (default) runs the hot operations as one
    server-side function call each (``_pg_hot``); ``off`` runs every operation as
    separate statements (the general path), e.g. to compare the two."""
    values = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query).get("hot_path", ["on"])
    if values[-1] not in ("on", "off"):
        raise InvalidArgumentError(f"hot_path must be on or off, not {values[-1]!r}")
    return values[-1] == "on"


def redact(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
