"""Transactional ids' records in a real (embedded) metadata store: created once,
changed only by compare-and-set, read through a cache that a stale read never
overwrites."""

from __future__ import annotations

import pytest

from managed_ledger import TxnId
from stableline.kafka.transactional_ids import TransactionalIdRecord, TransactionalIds
from stableline.metadata import BadVersion
from stableline.metadata.embedded import EmbeddedMetadataStore


@pytest.fixture
async def store(tmp_path):
    store = EmbeddedMetadataStore(tmp_path / "metadata")
    yield store
    await store.close()


def test_a_record_reads_back_from_its_json():
    record = TransactionalIdRecord(
        2**61 + 7, 3, 60_000, TxnId(2, 41), ("persistent://public/default/a",), None
    )
    assert TransactionalIdRecord.from_json(record.to_json()) == record
    ended = record.ended("commit")
    assert (ended.txn_id, ended.topics, ended.last_end) == (None, (), "commit")
    assert TransactionalIdRecord.from_json(ended.to_json()) == ended


async def test_an_id_is_created_once_and_any_string_is_an_id(store):
    ids = TransactionalIds(store, "standalone")
    first = await ids.create("orders/in a/../way", 60_000)
    again = await TransactionalIds(store, "standalone").create("orders/in a/../way", 10)
    assert again == first
    assert first.record.epoch == -1 and first.record.timeout_ms == 60_000
    assert await ids.read("other") is None


async def test_a_write_names_the_version_it_read_and_one_of_two_writers_wins(store):
    one, two = TransactionalIds(store, "c"), TransactionalIds(store, "c")
    created = await one.create("t", 1000)
    written = await one.write("t", created, TransactionalIdRecord(5, 0, 1000))
    with pytest.raises(BadVersion):
        await two.write("t", created, TransactionalIdRecord(5, 0, 2000))
    assert (await two.read("t")).record == written.record
    # The loser's stale cached copy is dropped; a write from a fresh read wins.
    await two.write("t", await two.read("t", fresh=True), TransactionalIdRecord(5, 1, 1000))
    assert (await one.read("t")).record.epoch == 0  # one's cache, not yet told
    assert (await one.read("t", fresh=True)).record.epoch == 1


async def test_clusters_on_one_store_keep_their_own_ids(store):
    await TransactionalIds(store, "east").create("t", 1000)
    assert await TransactionalIds(store, "west").read("t") is None
