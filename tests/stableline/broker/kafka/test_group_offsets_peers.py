"""PeerGroupOffsets: a group's offsets on partitions other brokers own go to each
owner in one call, and whatever stops them is answered so that clients retry. The
placement and the peer client are fakes at the edge; the cluster tests
(tests/cluster/test_kafka_failover.py) run it between real brokers."""

from __future__ import annotations

from dispatcher import IsolationLevel
from managed_ledger import TxnId
from stableline.broker.cluster.peers import FetchedGroupOffset, GroupOffsetCommit, GroupOffsetHold
from stableline.broker.kafka.coordinator.group_offsets import CommittedOffset, OffsetToCommit
from stableline.broker.kafka.protocol.messages import ErrorCode
from stableline.broker.kafka.server.group_offsets_peers import RETRY_LATER, PeerGroupOffsets
from stableline.metadata import BrokerInfo
from stableline.topic_name import TopicName


def _broker(address: str) -> BrokerInfo:
    host, _, port = address.partition(":")
    return BrokerInfo(address, address, f"http://{host}:8{port}", "", 0, "", 0, "")


class Placement:
    """Topic a on broker 1, b on broker 2, c's owner not live."""

    async def serving_broker(self, name: TopicName) -> BrokerInfo | None:
        owner = {"a": "127.0.0.1:1", "b": "127.0.0.2:1"}.get(name.local_name)
        if owner is None:
            raise RuntimeError("its owner is not live")
        return _broker(owner)


class Peers:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list]] = []

    async def commit_group_offsets(self, address, group_id, read_committed, offsets):
        self.calls.append((address, offsets))
        if address == "127.0.0.2:1":
            return [int(ErrorCode.NOT_LEADER_OR_FOLLOWER)] * len(offsets)
        return [0] * len(offsets)

    async def fetch_group_offsets(self, address, group_id, partitions):
        self.calls.append((address, partitions))
        if address == "127.0.0.2:1":
            raise ConnectionError("unreachable")
        return [FetchedGroupOffset(7, "m") for _ in partitions]

    async def hold_group_offsets(self, address, group_id, read_committed, txn_id, holds):
        self.calls.append((address, (txn_id, read_committed, holds)))
        if address == "127.0.0.2:1":
            return [int(ErrorCode.NOT_LEADER_OR_FOLLOWER)] * len(holds)
        return [int(ErrorCode.ILLEGAL_GENERATION) if h.offset > 8 else 0 for h in holds]


async def _name(topic: str, partition: int) -> TopicName:
    return TopicName.parse(f"persistent://public/default/{topic}")


def _offsets(peers: Peers) -> PeerGroupOffsets:
    return PeerGroupOffsets(_name, Placement(), lambda: peers)


async def test_commits_go_to_each_owner_once_and_what_cannot_land_is_retried():
    peers = Peers()
    results = await _offsets(peers).commit(
        "g",
        [
            OffsetToCommit("a", 0, 5),
            OffsetToCommit("b", 0, 6),
            OffsetToCommit("a", 0, 8, "x"),
            OffsetToCommit("c", 0, 9),
        ],
        IsolationLevel.READ_COMMITTED,
    )
    # b's owner let go of it meanwhile; c's owner is not live: clients retry both.
    assert results == [ErrorCode.NONE, RETRY_LATER, ErrorCode.NONE, RETRY_LATER]
    assert sorted(peers.calls) == [
        ("127.0.0.1:1", [GroupOffsetCommit("a", 0, 5), GroupOffsetCommit("a", 0, 8, "x")]),
        ("127.0.0.2:1", [GroupOffsetCommit("b", 0, 6)]),
    ]


async def test_fetches_answer_the_owners_offsets_and_retry_where_none_answered():
    peers = Peers()
    results = await _offsets(peers).fetch("g", [("a", 0), ("b", 0), ("c", 0)])
    assert results == [
        CommittedOffset(7, "m"),
        CommittedOffset(-1, "", RETRY_LATER),
        CommittedOffset(-1, "", RETRY_LATER),
    ]


async def test_holds_in_a_transaction_go_to_each_owner_once_with_its_refusals():
    peers = Peers()
    txn_id = TxnId(1, 2)
    holds = [
        GroupOffsetHold("a", 0, 5, held_from=3),
        GroupOffsetHold("b", 0, 6),
        GroupOffsetHold("a", 1, 9),
        GroupOffsetHold("c", 0, 9),
    ]
    results = await _offsets(peers).hold("g", txn_id, holds, IsolationLevel.READ_UNCOMMITTED)
    # The owner's own refusal is the client's; an owner that let go or is not live
    # is retried.
    assert results == [ErrorCode.NONE, RETRY_LATER, ErrorCode.ILLEGAL_GENERATION, RETRY_LATER]
    assert sorted(peers.calls, key=lambda call: call[0]) == [
        ("127.0.0.1:1", (txn_id, False, [holds[0], holds[2]])),
        ("127.0.0.2:1", (txn_id, False, [holds[1]])),
    ]
