"""PartitionedTopics in process (stableline.broker.topics.partitioned): the name rules hold
under concurrent creations, and counts survive a reopen of the metadata store."""

from __future__ import annotations

import asyncio

import pytest

from managed_ledger import LocalStore
from stableline.broker.config import load_config
from stableline.broker.topics.partition_counts import EmbeddedPartitionedMetadata
from stableline.broker.topics.partitioned import PartitionedTopics, TopicConflictError
from stableline.broker.topics.registry import TopicNotFoundError, TopicRegistry
from stableline.topic_name import TopicName


@pytest.fixture
async def opened(tmp_path):
    config = load_config(None, {"data_dir": tmp_path / "data", "fsync": False})
    store = LocalStore(config.metadata_dir)
    registry = TopicRegistry(config, store)
    yield (
        config,
        store,
        registry,
        PartitionedTopics(config, registry, EmbeddedPartitionedMetadata(store)),
    )
    await registry.close()
    store.close()


@pytest.mark.parametrize("plain_first", [True, False])
@pytest.mark.parametrize("by_use", [True, False])
async def test_a_plain_and_a_partitioned_creation_of_one_name_at_once_let_one_win(
    opened, plain_first, by_use
):
    _, _, registry, partitioned = opened
    name = TopicName.parse("race")
    # By an admin, or by a client's first use.
    plain = registry.get(name) if by_use else registry.create(name)
    made = partitioned.create(name, 3)
    results = await asyncio.gather(
        *((plain, made) if plain_first else (made, plain)), return_exceptions=True
    )
    failures = [r for r in results if isinstance(r, BaseException)]
    assert len(failures) == 1 and isinstance(failures[0], TopicConflictError), results
    is_partitioned = partitioned.partitions(name) == 3
    assert is_partitioned != registry.exists(name)
    # The other kind stays refused afterwards.
    with pytest.raises(TopicConflictError):
        if is_partitioned:
            await registry.create(name)
        else:
            await partitioned.create(name, 2)


async def test_counts_are_read_back_from_the_store(opened):
    _, store, registry, partitioned = opened
    await partitioned.create(TopicName.parse("persistent://t/ns/a"), 2)
    await partitioned.create(TopicName.parse("b"), 5)
    await partitioned.grow(TopicName.parse("b"), 7)
    again = EmbeddedPartitionedMetadata(store)
    assert again.partitions(TopicName.parse("b")) == 7
    assert again.partitions(TopicName.parse("persistent://t/ns/a")) == 2
    assert again.names("t/ns") == ["persistent://t/ns/a"]
    assert registry.names("t/ns") == [
        "persistent://t/ns/a-partition-0",
        "persistent://t/ns/a-partition-1",
    ]


async def test_a_partition_is_made_only_with_its_topic_never_by_a_first_use(opened):
    _, _, registry, partitioned = opened
    await partitioned.create(TopicName.parse("p"), 2)
    await registry.get(TopicName.parse("p-partition-1"))  # one of its partitions
    for beyond in ("p-partition-2", "never-partition-0"):
        with pytest.raises(TopicNotFoundError, match="ending in -partition-<n>"):
            await registry.get(TopicName.parse(beyond))
    await partitioned.grow(TopicName.parse("p"), 3)
    await registry.get(TopicName.parse("p-partition-2"))
    await partitioned.delete(TopicName.parse("p"))
    with pytest.raises(TopicNotFoundError):
        await registry.get(TopicName.parse("p-partition-0"))
