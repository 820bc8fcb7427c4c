"""Message streams' limits and the checks of what a client or a decision asks for
(stream names, dedup ids, append batches, pages): pure, so command validation
(``_logic``) uses them without the streams' storage (``_streams``)."""

from __future__ import annotations

from durable_rpc.errors import InvalidArgumentError, StreamBatchTooLargeError

#: At most this many items per append (client or workflow).
MAX_BATCH = 100
#: At most this many items per page.
MAX_PAGE = 100
#: Stream names and dedup ids are at most this long.
MAX_NAME = 200
#: The first character of the dedup ids of workflow appends.
WORKFLOW_DEDUP_PREFIX = "@"


def check_stream(stream: str) -> None:
    if not stream or len(stream) > MAX_NAME:
        raise InvalidArgumentError(
            f"a stream name must be 1 to {MAX_NAME} characters, got {len(stream)}"
        )


def check_batch(count: int, where: str) -> None:
    if count == 0:
        raise InvalidArgumentError(f"{where}: an append needs at least one item")
    if count > MAX_BATCH:
        raise StreamBatchTooLargeError(f"{where}: {count} items in one append, at most {MAX_BATCH}")


def check_dedup_id(dedup_id: str, index: int) -> None:
    if not dedup_id or len(dedup_id) > MAX_NAME:
        raise InvalidArgumentError(
            f"item {index}: a dedup id must be 1 to {MAX_NAME} characters, got {len(dedup_id)}"
        )
    if dedup_id.startswith(WORKFLOW_DEDUP_PREFIX):
        raise InvalidArgumentError(
            f"item {index}: dedup id {dedup_id!r} starts with {WORKFLOW_DEDUP_PREFIX!r}, "
            "which marks the items workflow code appended"
        )


def check_page(offset: int, limit: int) -> int:
    """The page size asked for (0: the largest)."""
    if offset < 0:
        raise InvalidArgumentError(f"a stream offset must be >= 0, got {offset}")
    if not 0 <= limit <= MAX_PAGE:
        raise InvalidArgumentError(
            f"a page holds 1 to {MAX_PAGE} items (0: {MAX_PAGE}), got {limit}"
        )
    return limit or MAX_PAGE
