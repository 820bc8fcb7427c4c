"""The code fingerprint of a workflow class: what its code *does*, not how it is written.

A run is pinned to the fingerprint it started with, and the store refuses a changed
fingerprint under the same ``(name, version)`` while open runs are pinned to the old one
(docs/engine.md, "Definitions"). So the fingerprint must change with the code's meaning
and with nothing else: comments, docstrings, blank lines, indentation and line breaks
never count. It is the SHA-256 of the class's syntax tree, serialized canonically.

The serialization is our own rather than ``ast.dump``: ``ast.dump``'s text has changed
between Python versions (3.13 omits empty and ``None`` fields), and a worker upgraded to
a newer Python must not look like new code. Fields that are empty or ``None`` are left
out here for the same reason: new Python versions add optional fields (``type_params``
in 3.12) that old code never sets.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import textwrap

from durable_rpc.fingerprint_algorithms import SOURCE_TEXT_V1, SYNTAX_TREE_V2

#: The algorithm :func:`fingerprint` implements.
ALGORITHM = SYNTAX_TREE_V2

_VERSION = b"durable-rpc fingerprint v2\n"


def fingerprint(cls: type) -> str:
    """SHA-256 (hex) of ``cls``'s source with comments, docstrings and formatting
    ignored; classes without source (built at runtime, from a REPL) are identified by
    their qualified name, the best stable identity available."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
        tree: ast.AST | None = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        tree = None
    digest = hashlib.sha256(_VERSION)
    if tree is None:
        digest.update(f"{cls.__module__}.{cls.__qualname__}".encode())
    else:
        _write(_without_docstrings(tree), digest)
    return digest.hexdigest()


def legacy_fingerprints(cls: type) -> dict[str, str]:
    """``cls``'s fingerprint under each earlier algorithm, by name: what lets a server
    that stored one of them see that the code itself did not change."""
    return {SOURCE_TEXT_V1: _source_text_fingerprint(cls)}


def _source_text_fingerprint(cls: type) -> str:
    """The fingerprint of schema versions up to 6: SHA-256 of the class's source text
    exactly as ``inspect.getsource`` returns it (not dedented: a nested class's
    indentation counted), or of its qualified name when it has no source."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        source = f"{cls.__module__}.{cls.__qualname__}"
    return hashlib.sha256(source.encode()).hexdigest()


def _without_docstrings(tree: ast.AST) -> ast.AST:
    """Drop the docstring of every module, class and function: documentation is not
    behaviour. A body left empty gets ``pass`` so the tree stays well formed."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return tree


def _write(value: object, out: hashlib._Hash) -> None:
    """A canonical, unambiguous byte form: node type, then each non-empty field by name.
    Positions (line, column) are attributes, not fields, so they never count."""
    if isinstance(value, ast.AST):
        out.update(f"({type(value).__name__}".encode())
        for name in value._fields:
            field = getattr(value, name, None)
            if field is None or field == []:
                continue
            out.update(f" {name}=".encode())
            _write(field, out)
        out.update(b")")
    elif isinstance(value, list):
        out.update(b"[")
        for item in value:
            _write(item, out)
            out.update(b",")
        out.update(b"]")
    else:
        # Constants: the type keeps 1, 1.0, True and "1" apart; repr is exact for each.
        out.update(f"{type(value).__name__}:{value!r}".encode())
