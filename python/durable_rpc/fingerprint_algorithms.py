"""The names of the algorithms that make definition fingerprints, once: the worker SDK
tags what it sends with them (``workflow/_fingerprint.py``), the server records the one
each stored fingerprint was made by (``store/_definition_fingerprints.py``).

A change of algorithm is not a change of code: a worker reports its fingerprint under
the current algorithm and, beside it, under each earlier one it still computes, so a
fingerprint stored by an earlier release is compared like with like (docs/engine.md,
"Upgrades and fingerprint algorithms").
"""

from __future__ import annotations

#: SHA-256 of the class's syntax tree in a canonical form: comments, docstrings and
#: formatting never count. The current algorithm.
SYNTAX_TREE_V2 = "syntax-tree-v2"
#: SHA-256 of the class's source text as ``inspect.getsource`` returns it (every
#: character counts). Fingerprints of schema versions up to 6 were made by it.
SOURCE_TEXT_V1 = "source-text-v1"
#: What a worker that names no algorithm sent: every SDK from the syntax-tree algorithm
#: on, until the name went on the wire.
UNNAMED = SYNTAX_TREE_V2
