"""A topic registry on a local store in a temporary data dir, for the registry's tests."""

from __future__ import annotations

import pytest

from managed_ledger import LocalStore
from stableline.broker.config import load_config
from stableline.broker.topics.registry import TopicRegistry


@pytest.fixture
async def registry(tmp_path):
    config = load_config(None, {"data_dir": tmp_path / "data", "fsync": False})
    store = LocalStore(config.metadata_dir)
    made = TopicRegistry(config, store)
    yield made
    await made.close()
    store.close()
