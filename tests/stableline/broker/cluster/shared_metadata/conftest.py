"""Two brokers' views of the cluster's shared metadata, on a real etcd (two sessions)
and on the embedded store (one store, two views), as tests/metadata runs the store."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from tests.metadata.conftest import etcd, etcd_binary, open_store, root  # noqa: F401 - fixtures

WAIT_S = 5.0


async def eventually(condition: Callable[[], bool], what: str) -> None:
    """Wait for `condition` (another view's watch to bring a change), with a deadline."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {WAIT_S} s waiting for {what}")
        await asyncio.sleep(0.005)


@pytest.fixture
async def two_views(open_store):  # noqa: F811 - the fixture imported above
    """`await two_views(cls)`: two started instances of `cls`, as two brokers hold them."""
    opened = []

    async def make(cls):
        first = await open_store()
        second = await open_store() if open_store.kind == "etcd" else first
        views = (cls(first), cls(second))
        for view in views:
            await view.start()
            opened.append(view)
        return views

    yield make
    for view in opened:
        await view.close()


@pytest.fixture
def tenant(root: str) -> str:  # noqa: F811 - the fixture imported above
    """A tenant name no other test of this session uses (the shared prefixes are fixed)."""
    return "t" + root.removeprefix("/test-")
