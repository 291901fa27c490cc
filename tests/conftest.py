"""Shared fixtures: a real broker process on 127.0.0.1 with a temporary data dir."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stableline.testing import BrokerProcess


@pytest.fixture
def store(tmp_path: Path) -> Iterator:
    """A metadata store (LMDB) in tmp_path, for the engine packages' tests."""
    from managed_ledger import LocalStore

    metadata = LocalStore(tmp_path / "metadata")
    yield metadata
    metadata.close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path / "data").running() as process:
        yield process


@pytest.fixture
def client(broker: BrokerProcess):
    import stableline

    with stableline.Client(broker.service_url) as connected:
        yield connected


def wait_until(condition, timeout_s: float = 10.0, message: str = "condition") -> None:
    """Wait for a condition with a deadline (no fixed sleeps standing in for sync)."""
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {message}")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


@pytest.fixture
def wait():
    """`wait(condition, timeout_s, message)`: poll a condition until a deadline."""
    return wait_until
