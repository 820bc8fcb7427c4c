"""The PostgreSQL hot path's server-side functions: their texts, one file per version.

An activity completion carrying an inline decision (docs/engine.md, "Inline workflow
tasks") is two of a hello workflow's four durable commits. Sent as separate statements
it costs ~9 round trips, and on PostgreSQL the cost of a workflow is per statement
(docs/scale-out.md): driver work in the server, protocol work in the backend and a
context switch each way. ``drpc_record_decision`` runs the whole operation in the
backend as one autocommitted call: the fenced completion, the run lock, the checks, the
events, the activity rows (eagerly leased), the close, the ``NOTIFY``;
``drpc_start_workflow`` does the same for a start.

They cover only the common shape of an operation. Anything else — a lease that is not
live (late holders, duplicates), a closed run, a history that moved on, a workflow task
or update request pending, a used seq, a parent or open children when closing, a
decision past the history limit, and each case a later migration hands back — raises
SQLSTATE ``DRFB1`` before anything is kept (the call's transaction rolls back whole),
and the store runs the general path, which answers every case. So a function never
decides anything differently: it either does exactly what the general path would have
done, or nothing.

Events are built in the backend because they carry the database time of the commit,
which the server cannot know before the call: the server serializes every part that does
not depend on it, the function adds the event id and the times in protobuf's field order
(the ``drpc_pb_*`` helpers), so the bytes equal ``_logic.make_event``'s
(tests/store/test_pg_hot_path.py compares them). PL/pgSQL throughout: a chain of
SQL-language helpers, not inlined when called from PL/pgSQL, measured ~50 us an event
against ~2 us for these.

Each version of a function that a migration creates is one whole file,
``pg_functions/<function>.v<migration>.sql``: its leading ``--`` lines say what that
version changes and why (notes for the reader, not sent), the rest is the statement the
migration applies. A function's file of the highest version is the one installed. A
released file never changes (tests/store/test_migrations_list.py pins the statements);
a change to a function is a new file, of the new migration, holding the whole new text.
"""

from __future__ import annotations

from importlib.resources import files

#: SQLSTATE the hot-path functions raise when the general path must run instead.
FALLBACK_SQLSTATE = "DRFB1"

#: The function texts, shipped in the package beside this module.
_FUNCTIONS = files("durable_rpc.store").joinpath("pg_functions")


def function_file(name: str, version: int) -> str:
    """The file name of ``name``'s text as migration ``version`` creates it."""
    return f"{name}.v{version}.sql"


def statement_of(text: str) -> str:
    """The statement of a function file: its text without the leading ``--`` lines and
    without the final newline."""
    while text.startswith("--"):
        text = text.partition("\n")[2]
    return text.removesuffix("\n")


def pg_functions(version: int, *names: str) -> tuple[str, ...]:
    """Migration ``version``'s statements creating the functions ``names``, in order."""
    return tuple(
        statement_of(_FUNCTIONS.joinpath(function_file(name, version)).read_text(encoding="utf-8"))
        for name in names
    )
