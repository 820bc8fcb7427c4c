"""Definition fingerprints through a real server: what a deploy of edited workflow code
does. Comments, docstrings and formatting never count; a real change is refused only
while open runs are pinned to the code it replaces, and the refusal says the way out."""

from __future__ import annotations

import importlib.util
import sys
import uuid
from pathlib import Path
from types import ModuleType

import pytest

from durable_rpc import Client, Worker
from durable_rpc.errors import DefinitionChangedError
from durable_rpc.workflow._definition import definition_of
from durable_rpc.workflow._fingerprint import fingerprint

ORIGINAL = """
from durable_rpc import workflow


@workflow.defn(name="Orders", version=1)
class Orders:
    @workflow.run
    async def run(self, n: int) -> int:
        total = n * 2
        return total + 1
"""

#: The same code, edited as people do: comments, a docstring, other line breaks and
#: spacing, a blank line and an indented class (as a nested one would be).
COSMETIC = '''
from durable_rpc import workflow

if True:
    # Our order workflow.
    @workflow.defn(name = "Orders",
                   version = 1)
    class Orders:
        """Orders: doubles and adds one. (Docstrings are documentation, not behaviour.)"""

        @workflow.run
        async def run(self, n: int) -> int:
            """The main method."""
            total = (n
                     * 2)  # doubled

            return total + 1
'''

CHANGED = ORIGINAL.replace("return total + 1", "return total + 2")


def load(source: str, directory: Path) -> ModuleType:
    """Import ``source`` as a fresh module from a real file (getsource needs one)."""
    name = f"defn_{uuid.uuid4().hex[:8]}"
    path = directory / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_comments_docstrings_and_formatting_never_change_the_fingerprint(
    tmp_path: Path,
) -> None:
    original = load(ORIGINAL, tmp_path).Orders
    cosmetic = load(COSMETIC, tmp_path).Orders
    changed = load(CHANGED, tmp_path).Orders
    assert fingerprint(original) == fingerprint(cosmetic)
    assert fingerprint(original) != fingerprint(changed)
    # The int version is its decimal string: the same definition as version="1".
    assert definition_of(original).version == "1"


@pytest.mark.parametrize(
    "edit",
    [
        ("n * 2", "n * 3"),  # another constant
        ("n * 2", "n + 2"),  # another operator
        ("n: int", "n: str"),  # another hint: the converter decodes by it
        ("total + 1", "1 + total"),  # the same value, computed in another order
    ],
)
def test_every_change_of_code_changes_the_fingerprint(
    tmp_path: Path, edit: tuple[str, str]
) -> None:
    original = load(ORIGINAL, tmp_path).Orders
    edited = load(ORIGINAL.replace(*edit), tmp_path).Orders
    assert fingerprint(original) != fingerprint(edited)


def test_version_must_be_a_str_or_an_int() -> None:
    from durable_rpc import workflow

    with pytest.raises(TypeError, match="must be a str or an int"):
        workflow.defn(version=1.5)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="must be a str or an int"):
        workflow.defn(version=True)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="must not be empty"):
        workflow.defn(version="")


async def test_an_int_version_runs_end_to_end(client: Client, tmp_path: Path) -> None:
    """``@workflow.defn(version=1)`` once failed deep inside the client with a TypeError."""
    orders = load(ORIGINAL, tmp_path).Orders
    queue = f"q-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[orders]):
        handle = await client.start_workflow(orders.run, 20, id="int-version", task_queue=queue)
        assert await handle.result() == 41
    assert (await handle.describe()).info.workflow_version == "1"


async def test_a_redeploy_with_edited_comments_registers_and_a_real_change_is_refused(
    client: Client, tmp_path: Path
) -> None:
    queue = f"q-{uuid.uuid4().hex[:8]}"
    original = load(ORIGINAL, tmp_path).Orders
    await Worker(client, task_queue=queue, workflows=[original], worker_id="w-old").register()
    # A run pinned to the original code, left open (no worker polls the queue).
    await client.start_workflow(original.run, 1, id="pinned", task_queue=queue)

    cosmetic = load(COSMETIC, tmp_path).Orders
    await Worker(client, task_queue=queue, workflows=[cosmetic], worker_id="w-cosmetic").register()

    changed = load(CHANGED, tmp_path).Orders
    with pytest.raises(DefinitionChangedError) as refused:
        await Worker(client, task_queue=queue, workflows=[changed], worker_id="w-new").register()
    message = str(refused.value)
    assert "1 open run is pinned" in message
    for way_out in ("new version", "workflow.patched", "allow_definition_change=True"):
        assert way_out in message
    assert str(tmp_path) not in message

    # Once the pinned run is closed, the changed code simply takes over.
    await client.get_handle("pinned").terminate("closing for the deploy")
    await Worker(client, task_queue=queue, workflows=[changed], worker_id="w-new").register()
