"""Queries: a handler called on the replayed instance, which must only read state."""

from __future__ import annotations

import asyncio

from durable_rpc import converter
from durable_rpc.workflow import _sandbox
from durable_rpc.workflow._errors import RestrictedOperationError
from durable_rpc.workflow._instance import InstanceState


class QueriesMixin(InstanceState):
    """Answers queries on the replayed instance."""

    def query(self, name: str, input_data: bytes) -> bytes:
        """Call query ``name`` on the replayed instance; its encoded result.

        Raises :class:`QueryError` for anything that makes the query unanswerable (an
        unknown name, a handler that raised, awaited or tried to change the run). The
        instance is meant to be discarded afterwards: a query never produces commands.
        """
        definition = self.definition.queries.get(name)
        if definition is None:
            known = ", ".join(sorted(self.definition.queries)) or "none"
            raise QueryError(
                f"workflow {self.definition.name!r} has no query {name!r} (known: {known})",
                "QueryNotFound",
            )
        if self.info is None or self._obj is None:
            raise QueryError("the workflow has not started yet: nothing to query", "QueryError")
        if isinstance(self._obj, Exception):
            raise QueryError(f"the workflow constructor failed: {self._obj!r}", "QueryError")
        handler = definition.method.__get__(self._obj)
        self._querying = name
        try:
            with self.loop.running(), _sandbox.restricted():
                args = converter.decode_args(input_data, definition.arg_hints)
                result = handler(*args)
                if asyncio.iscoroutine(result):
                    result.close()
                    raise RestrictedOperationError(f"query {name!r} returned a coroutine")
                if self.loop.violation is not None:
                    raise self.loop.violation
            return converter.encode(result)
        except QueryError:
            raise
        except Exception as exc:
            raise QueryError(str(exc) or repr(exc), type(exc).__name__) from exc
        finally:
            self._querying = None


class QueryError(Exception):
    """A query could not be answered; ``failure_type`` is reported to the caller."""

    def __init__(self, message: str, failure_type: str) -> None:
        super().__init__(message)
        self.failure_type = failure_type
