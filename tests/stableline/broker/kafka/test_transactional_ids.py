"""Transactional ids' records in a real (embedded) metadata store: created once,
changed only by compare-and-set, read through a cache that a stale read never
overwrites."""

from __future__ import annotations

import pytest

from managed_ledger import TxnId
from stableline.broker.kafka.coordinator.transactional_ids import (
    TransactionalId,
    TransactionalIdRecord,
    TransactionalIds,
)
from stableline.metadata import BadVersion
from stableline.metadata.embedded import EmbeddedMetadataStore
from stableline.metadata.layout import kafka_transactional_id_of, kafka_transactional_id_path

T = TransactionalId("", "t")
IDLE, BUSY = TransactionalId("", "idle"), TransactionalId("", "busy")
# Any string is an id, and any role an owner: both are encoded into one path segment.
ODD = TransactionalId("a@b/c", "orders/in a/../way@x")


@pytest.fixture
async def store(tmp_path):
    store = EmbeddedMetadataStore(tmp_path / "metadata")
    yield store
    await store.close()


def test_a_record_reads_back_from_its_json():
    record = TransactionalIdRecord(
        2**61 + 7,
        3,
        60_000,
        txn_id=TxnId(2, 41),
        topics=("persistent://public/default/a",),
        groups=("copier",),
        updated_ms=1234,
        last_epoch=2,
    )
    assert TransactionalIdRecord.from_json(record.to_json()) == record
    ended = record.ended("commit")
    assert (ended.txn_id, ended.topics, ended.groups, ended.last_end) == (None, (), (), "commit")
    assert TransactionalIdRecord.from_json(ended.to_json()) == ended


async def test_an_id_is_created_once_and_any_string_is_an_id(store):
    ids = TransactionalIds(store, "standalone")
    first = await ids.create(ODD, 60_000)
    again = await TransactionalIds(store, "standalone").create(ODD, 10)
    assert again == first
    assert first.record.epoch == -1 and first.record.timeout_ms == 60_000
    assert await ids.read(TransactionalId("", "other")) is None


async def test_a_write_names_the_version_it_read_and_one_of_two_writers_wins(store):
    one, two = TransactionalIds(store, "c"), TransactionalIds(store, "c")
    created = await one.create(T, 1000)
    written = await one.write(T, created, TransactionalIdRecord(5, 0, 1000))
    with pytest.raises(BadVersion):
        await two.write(T, created, TransactionalIdRecord(5, 0, 2000))
    assert (await two.read(T)).record == written.record
    # The loser's stale cached copy is dropped; a write from a fresh read wins.
    await two.write(T, await two.read(T, fresh=True), TransactionalIdRecord(5, 1, 1000))
    assert (await one.read(T)).record.epoch == 0  # one's cache, not yet told
    assert (await one.read(T, fresh=True)).record.epoch == 1


async def test_clusters_and_roles_on_one_store_keep_their_own_ids(store):
    await TransactionalIds(store, "east").create(T, 1000)
    assert await TransactionalIds(store, "west").read(T) is None
    assert await TransactionalIds(store, "east").read(TransactionalId("alice", "t")) is None


def test_a_path_names_its_owner_and_id_back():
    path = kafka_transactional_id_path("c", ODD.owner, ODD.name)
    assert path.count("/") == 5  # /stableline/broker/app/kafka/c/transactional-ids/SEGMENT
    assert kafka_transactional_id_of(path) == (ODD.owner, ODD.name)


async def test_ids_idle_past_the_expiration_are_deleted_and_others_kept(store):
    now = [1_000.0]
    ids = TransactionalIds(store, "c", clock=lambda: now[0])
    idle = await ids.create(IDLE, 1000)
    await ids.write(IDLE, idle, TransactionalIdRecord(5, 0, 1000))
    now[0] += 100
    busy = await ids.create(BUSY, 1000)
    day_ms = 24 * 3600 * 1000
    assert await ids.expire(int(now[0] * 1000) + day_ms - 1, expiration_ms=day_ms) == 1
    assert await ids.read(IDLE) is None
    assert await TransactionalIds(store, "c").read(IDLE) is None
    assert (await ids.read(BUSY, fresh=True)).record == busy.record
    # The next producer of an expired id starts it afresh.
    assert (await ids.create(IDLE, 1000)).record.epoch == -1


async def test_an_id_written_after_the_expiry_read_it_is_kept(store, monkeypatch):
    ids = TransactionalIds(store, "c", clock=lambda: 1.0)
    created = await ids.create(T, 1000)
    scan = store.scan

    async def scan_then_write(prefix):
        found = await scan(prefix)
        await ids.write(T, created, TransactionalIdRecord(5, 0, 1000))  # used meanwhile
        return found

    monkeypatch.setattr(store, "scan", scan_then_write)
    assert await ids.expire(10**12, expiration_ms=1) == 0
    assert (await ids.read(T, fresh=True)).record.producer_id == 5
