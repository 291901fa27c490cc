"""The blocking client is a thin shell over the asyncio client's public API: it names
nothing private of stableline.aio, and holds no send queue and no ack grouping of
its own (those live once, in stableline.aio's ThreadSender and acknowledge_nowait).

Read from the source, not run: a private name reached for in a rarely taken branch
fails here as surely as one on the hot path."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The modules of the blocking face: the shell and the package root re-exporting it.
SYNC_MODULES = [ROOT / "stableline" / "_sync.py", ROOT / "stableline" / "__init__.py"]
# What a send queue or an ack group is made of: a deque handed between threads, a
# condition to wait for room on, a timer armed on the loop.
QUEUE_MACHINERY = {"deque", "Condition", "call_later", "starmap"}
# The shell's attributes that hold the asyncio object it wraps (`self._inner = inner`).
AIO_HOLDERS = {"_inner"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_names(tree: ast.Module) -> set[str]:
    """The private names the shell defines itself: its functions, classes, module
    constants and the attributes its methods assign on self."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def private_uses_of_aio(source: str) -> list[str]:
    """Every private name of stableline.aio the source uses: a private module or name
    imported from it, a private attribute of the asyncio objects the shell wraps
    (`self._inner._x`), or any private attribute the shell does not define itself."""
    tree = ast.parse(source)
    own = _own_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("stableline.aio"):
            parts = node.module.split(".")
            found += [f"from {node.module}" for part in parts if _private(part)]
            found += [f"{node.module}.{a.name}" for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("stableline.aio") and any(
                    _private(part) for part in alias.name.split(".")
                ):
                    found.append(f"import {alias.name}")
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            wraps_aio = isinstance(base, ast.Attribute) and base.attr in AIO_HOLDERS
            names_aio = isinstance(base, ast.Name) and base.id == "aio"
            if wraps_aio or names_aio or node.attr not in own:
                found.append(f"line {node.lineno}: .{node.attr}")
    return sorted(found)


def queue_machinery(source: str) -> list[str]:
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        name = (
            node.id
            if isinstance(node, ast.Name)
            else node.attr
            if isinstance(node, ast.Attribute)
            else None
        )
        if name in QUEUE_MACHINERY:
            found.append(f"line {node.lineno}: {name}")
        if isinstance(node, ast.alias) and node.name.split(".")[-1] in QUEUE_MACHINERY:
            found.append(f"imports {node.name}")
    return found


@pytest.mark.parametrize("path", SYNC_MODULES, ids=lambda p: p.name)
def test_the_blocking_face_uses_no_private_name_of_stableline_aio(path):
    assert private_uses_of_aio(path.read_text()) == []


@pytest.mark.parametrize("path", SYNC_MODULES, ids=lambda p: p.name)
def test_the_blocking_face_holds_no_send_queue_and_no_ack_grouping(path):
    assert queue_machinery(path.read_text()) == []


def test_the_check_sees_private_names_of_the_asyncio_client():
    shell = """
from stableline.aio._producer import Producer
import stableline.aio._consumer
class Consumer:
    def __init__(self, inner):
        self._inner = inner
    def ack(self, m):
        self._inner._ack_with_reopen(m)
        aio._x
        m._entry
        self._mine = 1
        return self._mine
"""
    assert private_uses_of_aio(shell) == [
        "from stableline.aio._producer",
        "import stableline.aio._consumer",
        "line 10: ._entry",
        "line 8: ._ack_with_reopen",
        "line 9: ._x",
    ]


def test_the_check_sees_a_send_queue():
    shell = "from collections import deque\nclass P:\n    q = deque()\n"
    assert queue_machinery(shell) == ["imports deque", "line 3: deque"]
