"""SnapshotSender: the writer's transaction-buffer snapshots to one member, in order,
one call at a time, with the whole snapshot whenever the member may not hold the
state a change follows; never raising, whatever the member answers."""

from __future__ import annotations

import asyncio

from managed_ledger import ReplicaFencedError, ReplicaSnapshotMismatchError, SnapshotCopy
from stableline.broker.cluster.snapshot_sender import SnapshotSender

ADDRESS = "127.0.0.1:1"
WHOLE = SnapshotCopy(b"", True, {"meta": b"whole"})


def change(n: int) -> SnapshotCopy:
    return SnapshotCopy(b"after-%d" % (n - 1), False, {"meta": b"m%d" % n})


class ScriptedPeer:
    """Answers each snapshot call with the next scripted outcome (None: taken); a call
    waits while `gate` is clear."""

    def __init__(self, *outcomes: Exception | None):
        self.outcomes = list(outcomes)
        self.received: list[SnapshotCopy] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def replicate_snapshot(self, address, topic, epoch, copy, timeout_s=None):
        assert (address, topic, epoch) == (ADDRESS, "t", 3)
        await self.gate.wait()
        self.received.append(copy)
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if outcome is not None:
            raise outcome


def _sender(peer: ScriptedPeer, fenced: list | None = None) -> SnapshotSender:
    return SnapshotSender(
        ADDRESS, "t", 3, peer, lambda: WHOLE, (fenced if fenced is not None else []).append
    )


async def _settled(sender: SnapshotSender) -> None:
    async with asyncio.timeout(5):
        while sender.busy:
            await asyncio.sleep(0)


async def test_changes_go_one_after_another_as_changes():
    peer = ScriptedPeer()
    sender = _sender(peer)
    for n in (1, 2, 3):
        sender.offer(change(n))
        await _settled(sender)
    assert peer.received == [change(1), change(2), change(3)]
    assert (sender.sent, sender.wholes_sent) == (3, 0)


async def test_a_change_written_while_a_call_is_under_way_goes_as_the_whole_after_it():
    peer = ScriptedPeer()
    peer.gate.clear()
    sender = _sender(peer)
    sender.offer(change(1))
    await asyncio.sleep(0)
    sender.offer(change(2))
    sender.offer(change(3))  # at most one copy waits: the whole, read when it is sent
    peer.gate.set()
    await _settled(sender)
    assert peer.received == [change(1), WHOLE]


async def test_a_change_the_member_refuses_is_followed_by_the_whole():
    peer = ScriptedPeer(ReplicaSnapshotMismatchError("holds another"))
    sender = _sender(peer)
    sender.offer(change(5))
    await _settled(sender)
    assert peer.received == [change(5), WHOLE]
    assert sender.wholes_sent == 1


async def test_a_failed_call_is_forgotten_and_the_next_snapshot_still_goes():
    peer = ScriptedPeer(ConnectionError("away"))
    sender = _sender(peer)
    sender.offer(change(1))
    await _settled(sender)
    sender.offer(change(2))
    await _settled(sender)
    assert peer.received == [change(1), change(2)]
    assert (sender.failed, sender.sent) == (1, 1)


async def test_a_member_fenced_at_a_higher_epoch_ends_the_sender():
    peer = ScriptedPeer(ReplicaFencedError("epoch 4 held"))
    fenced: list = []
    sender = _sender(peer, fenced)
    sender.offer(change(1))
    await _settled(sender)
    sender.offer(change(2))
    sender.send_whole()
    await _settled(sender)
    assert len(fenced) == 1 and peer.received == [change(1)]
