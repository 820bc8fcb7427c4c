"""The store's modules import one another without a circle.

Every import of a ``durable_rpc.store`` module counts, wherever it is written: at the top
of a module, inside a function, or under ``if TYPE_CHECKING:``. A module that needs a
piece of a higher one gets that piece moved down instead, so each module can be read,
imported and tested on top of the modules below it.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

PACKAGE = "durable_rpc.store"


def store_dir() -> Path:
    """The package's directory, found without importing it (a circle can break that)."""
    spec = importlib.util.find_spec(PACKAGE)
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent


def module_name(path: Path) -> str:
    return PACKAGE if path.stem == "__init__" else f"{PACKAGE}.{path.stem}"


def imported_store_modules(path: Path, modules: set[str]) -> set[str]:
    """The store modules ``path`` imports, the package's ``__init__`` included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                # Relative: resolve against the package (every store module is top-level in it).
                base = PACKAGE if node.level == 1 else PACKAGE.rsplit(".", node.level - 1)[0]
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            for alias in node.names:
                # `from durable_rpc.store import _x` imports the module `_x`; a name that is
                # no module (`from durable_rpc.store import Store`) comes from the package.
                submodule = f"{source}.{alias.name}"
                found.add(submodule if submodule in modules else source)
    return {name for name in found if name in modules}


def store_import_graph() -> dict[str, set[str]]:
    paths = sorted(store_dir().glob("*.py"))
    modules = {module_name(path) for path in paths}
    return {
        module_name(path): imported_store_modules(path, modules) - {module_name(path)}
        for path in paths
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (first module repeated at the end), or None."""
    done: set[str] = set()
    for root in sorted(graph):
        if root in done:
            continue
        path = [root]
        on_path = {root}
        stack = [iter(sorted(graph[root]))]
        while stack:
            target = next(stack[-1], None)
            if target is None:
                stack.pop()
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
            elif target in on_path:
                return [*path[path.index(target) :], target]
            elif target not in done:
                path.append(target)
                on_path.add(target)
                stack.append(iter(sorted(graph[target])))
    return None


def test_every_import_form_is_an_edge(tmp_path: Path) -> None:
    """Top-level, function-level, TYPE_CHECKING, relative and package imports all count."""
    source = tmp_path / "_sample.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import json\n"
        "from durable_rpc.store._top import name\n"
        "from durable_rpc.store import _sibling, Store\n"
        "from ._relative import other\n"
        "if TYPE_CHECKING:\n"
        "    from durable_rpc.store._typing_only import T\n"
        "def f() -> None:\n"
        "    import durable_rpc.store._in_function\n"
    )
    names = ["_top", "_sibling", "_relative", "_typing_only", "_in_function", "_unused"]
    modules = {PACKAGE, *(f"{PACKAGE}.{name}" for name in names)}
    assert (
        imported_store_modules(source, modules)
        == {
            PACKAGE,  # Store comes from the package's __init__
            *(f"{PACKAGE}.{name}" for name in names[:-1]),
        }
    )


def test_graph_covers_the_store() -> None:
    graph = store_import_graph()
    assert {PACKAGE, f"{PACKAGE}._tx", f"{PACKAGE}._shared"} <= graph.keys()
    assert f"{PACKAGE}._tx" in graph[f"{PACKAGE}._shared"]


def test_find_cycle_names_the_circle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_store_modules_import_without_a_circle() -> None:
    cycle = find_cycle(store_import_graph())
    assert cycle is None, "import circle in the store: " + " -> ".join(cycle or [])
