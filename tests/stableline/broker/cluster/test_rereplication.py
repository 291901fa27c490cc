"""Rereplication decides which members of the topics led here to replace, and when:
the ownership and the writers are played by the test at the unit's edge (the real
ensemble change and copying are tests/cluster/test_rereplication.py's)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from stableline.broker.cluster.ownership import COPYING_PREFIX, OwnershipRecord
from stableline.broker.cluster.rereplication import Rereplication
from stableline.topic_name import TopicName

ME = "a:1"
TOPIC = "persistent://public/default/t"


class FakeStore:
    def session_holds(self) -> bool:
        return True


class FakeOwnership:
    """The records of topics led here, the live brokers and when the others left."""

    def __init__(self, records: dict[str, OwnershipRecord], live: set[str]):
        self.store = FakeStore()
        self.broker_id = ME
        self.records = records
        self.live = live
        self.gone: dict[str, int] = {}
        self.draining: frozenset[str] = frozenset()
        self.marked: frozenset[str] = frozenset()
        self.started_ms = int(time.time() * 1000)

    async def refresh_draining(self):
        self.draining = self.marked
        return self.draining

    def leaders(self):
        return {topic: record.leader for topic, record in self.records.items()}

    async def record(self, name):
        return self.records.get(str(name))

    def live_broker(self, broker_id):
        return object() if broker_id in self.live else None

    def holds_its_copy(self, record, member):
        known = record.data_dirs.get(member, "")
        return member in self.live and not known.startswith(COPYING_PREFIX)

    def gone_since_ms(self, broker_id):
        return self.gone.get(broker_id)

    def choose_replacement(self, ensemble, chosen=None):
        chosen = chosen or {}
        candidates = sorted(self.live - set(ensemble) - self.draining)
        candidates.sort(key=lambda b: chosen.get(b, 0))
        return candidates[0] if candidates else None

    async def replace_member(self, name, epoch, gone, member):
        record = self.records[str(name)]
        assert record.epoch == epoch
        self.records[str(name)] = replace(
            record,
            ensemble=tuple(member if m == gone else m for m in record.ensemble),
            data_dirs={member: COPYING_PREFIX},
        )

    async def change_record(self, name, change):
        self.records[str(name)] = change(self.records[str(name)])
        return self.records[str(name)]


class FakeWriter:
    def __init__(self, epoch: int):
        self.epoch = epoch
        self.replaced: list[tuple[str, str]] = []
        self.followed: list[tuple[str, ...]] = []

    def replace_member(self, gone, member):
        self.replaced.append((gone, member))

    def follow(self, members):
        self.followed.append(tuple(members))


def record(ensemble, epoch=3) -> OwnershipRecord:
    return OwnershipRecord(ensemble[0], epoch, tuple(ensemble), 0, 3, 2)


def setup(grace_s=60.0, live=("a:1", "b:1", "c:1", "d:1")):
    ownership = FakeOwnership({TOPIC: record([ME, "b:1", "c:1"])}, set(live))
    writer = FakeWriter(3)
    opened: list[TopicName] = []

    async def open_topic(name):
        opened.append(name)

    rereplication = Rereplication(ownership, lambda: {TOPIC: writer}, open_topic, grace_s)
    return ownership, writer, rereplication, opened


def test_a_member_gone_less_than_the_grace_period_is_kept():
    ownership, writer, rereplication, _ = setup()
    ownership.live.discard("c:1")
    ownership.gone["c:1"] = int(time.time() * 1000) - 30_000
    assert asyncio.run(rereplication.check()) == 0
    assert writer.replaced == []


def test_a_member_gone_longer_than_the_grace_period_is_replaced_by_a_live_broker():
    ownership, writer, rereplication, _ = setup()
    ownership.live.discard("c:1")
    ownership.gone["c:1"] = int(time.time() * 1000) - 61_000
    assert asyncio.run(rereplication.check()) == 1
    assert writer.replaced == [("c:1", "d:1")]
    assert ownership.records[TOPIC].ensemble == (ME, "b:1", "d:1")
    # Done: the next pass finds nothing to do.
    assert asyncio.run(rereplication.check()) == 0


def test_a_member_never_seen_live_counts_as_gone_since_this_broker_started():
    ownership, _writer, rereplication, _ = setup(grace_s=0.0)
    ownership.live.discard("c:1")
    assert asyncio.run(rereplication.check()) == 1
    ownership, _writer, rereplication, _ = setup(grace_s=60.0)
    ownership.live.discard("c:1")
    assert asyncio.run(rereplication.check()) == 0


def test_a_draining_member_is_replaced_at_once_and_never_chosen():
    ownership, writer, rereplication, _ = setup()
    ownership.marked = frozenset({"b:1"})
    assert asyncio.run(rereplication.check()) == 1
    assert writer.replaced == [("b:1", "d:1")]


def test_with_no_broker_to_take_the_copy_the_topic_stays_as_it_is():
    ownership, _writer, rereplication, _ = setup(live=("a:1", "b:1", "c:1"))
    ownership.marked = frozenset({"b:1"})
    assert asyncio.run(rereplication.check()) == 0
    assert ownership.records[TOPIC].ensemble == (ME, "b:1", "c:1")


def test_a_topic_led_here_but_not_open_is_opened_to_be_re_replicated():
    ownership, _writer, _, _ = setup()
    opened: list[TopicName] = []

    async def open_topic(name):
        opened.append(name)

    rereplication = Rereplication(ownership, dict, open_topic, 60.0)
    ownership.marked = frozenset({"b:1"})
    asyncio.run(rereplication.check())
    assert opened == [TopicName.parse(TOPIC)]


def test_a_writer_of_another_epoch_is_left_alone():
    ownership, writer, rereplication, _ = setup()
    writer.epoch = 2  # the record moved on: the topic was taken again
    ownership.marked = frozenset({"b:1"})
    assert asyncio.run(rereplication.check()) == 0
    assert writer.replaced == []


def test_topics_led_by_others_are_theirs_to_re_replicate():
    ownership, _writer, rereplication, _ = setup()
    ownership.records[TOPIC] = record(["b:1", ME, "c:1"])
    ownership.marked = frozenset({"c:1"})
    assert asyncio.run(rereplication.check()) == 0


def test_a_draining_broker_hands_the_topics_it_leads_to_another_member():
    ownership, writer, _, _ = setup()
    moved: list[TopicName] = []

    async def move_away(name):
        moved.append(name)
        return "b:1"

    rereplication = Rereplication(
        ownership, lambda: {TOPIC: writer}, lambda name: None, 60.0, move_away=move_away
    )
    ownership.marked = frozenset({ME})
    assert asyncio.run(rereplication.check()) == 0
    assert moved == [TopicName.parse(TOPIC)]
    assert writer.replaced == []  # its next leader replaces this broker
    # With no other member holding a copy, the topic stays.
    moved.clear()
    ownership.live -= {"b:1", "c:1"}
    asyncio.run(rereplication.check())
    assert moved == []


def test_a_copy_left_unfinished_gets_its_topic_opened_so_a_writer_finishes_it():
    """The writer making a copy was retired (this broker's session was lost) and the
    topic is not open: nothing else would make the copy whole."""
    ownership, writer, _, _ = setup()
    ownership.records[TOPIC] = replace(
        record([ME, "b:1", "d:1"]), data_dirs={"d:1": COPYING_PREFIX + "x"}
    )
    opened: list[TopicName] = []

    async def open_topic(name):
        opened.append(name)

    asyncio.run(Rereplication(ownership, dict, open_topic, 60.0).check())
    assert opened == [TopicName.parse(TOPIC)]
    # Open, its writer is making the copy: nothing to do.
    assert (
        asyncio.run(Rereplication(ownership, lambda: {TOPIC: writer}, open_topic, 60.0).check())
        == 0
    )
    assert writer.replaced == [] and opened == [TopicName.parse(TOPIC)]


def swapping(d_dir: str) -> OwnershipRecord:
    """c is to leave once d, the member joining, holds its copy."""
    return replace(record([ME, "b:1", "c:1", "d:1"]), data_dirs={"d:1": d_dir}, leaving="c:1")


def test_a_swap_whose_new_copy_is_whole_drops_the_leaving_member():
    ownership, writer, rereplication, _ = setup()
    ownership.records[TOPIC] = swapping(COPYING_PREFIX + "dd")
    asyncio.run(rereplication.check())
    assert ownership.records[TOPIC].ensemble == (ME, "b:1", "c:1", "d:1")  # d not whole
    assert writer.followed[-1] == ("b:1", "c:1", "d:1")
    ownership.records[TOPIC] = swapping("dd")
    asyncio.run(rereplication.check())
    assert ownership.records[TOPIC].ensemble == (ME, "b:1", "d:1")
    assert ownership.records[TOPIC].leaving == ""
    assert writer.followed[-1] == ("b:1", "d:1")
    assert writer.replaced == []


def test_a_swap_whose_new_member_is_gone_is_abandoned():
    ownership, writer, rereplication, _ = setup()
    ownership.records[TOPIC] = swapping(COPYING_PREFIX + "dd")
    ownership.live.discard("d:1")
    asyncio.run(rereplication.check())
    assert ownership.records[TOPIC].ensemble == (ME, "b:1", "c:1")
    assert ownership.records[TOPIC].leaving == ""
    assert writer.followed[-1] == ("b:1", "c:1")
    assert writer.replaced == []  # d is not replaced by another: the copy is let go
