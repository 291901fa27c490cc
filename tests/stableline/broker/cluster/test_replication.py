"""EnsembleReplication, the writer's links to its ensemble, with the peers played by the
test at the unit's edge: real ReplicaLogs copies behind an in-process stand-in for the
Peer service, which a test can take away (a broker down) and give back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from managed_ledger import (
    EntryHeader,
    LedgerFiles,
    LocalStore,
    ManagedLedger,
    ManagedLedgerConfig,
    Position,
    ReplicaSnapshotMismatchError,
    TxnId,
)
from managed_ledger.ledger import CURSORS_DB
from managed_ledger.replica import ReplicaFencedError, ReplicaLogs
from managed_ledger.snapshot_copy import FIRST, SNAPSHOTS_DB, held_digest
from stableline.broker.cluster.catch_up_throttle import CatchUpThrottle
from stableline.broker.cluster.replication import (
    REPLICATE_TIMEOUT_S,
    EnsembleReplication,
    NotEnoughReplicasError,
    ReplicaFencedOutError,
)
from txnbuffer import SnapshotPolicy, TransactionBuffer

TOPIC = "persistent://public/default/replicated"
STORAGE = "public/default/replicated"


class Unreachable(ConnectionError):
    pass


class InProcessPeers:
    """Each address is a ReplicaLogs in a directory of its own; `down` ones raise."""

    def __init__(self, root: Path, addresses: list[str]):
        self.copies: dict[str, ReplicaLogs] = {}
        for address in addresses:
            directory = root / address
            store = LocalStore(directory / "metadata")
            self.copies[address] = ReplicaLogs(
                store, lambda name, d=directory: d / "ledgers" / name, LedgerFiles(64), fsync=False
            )
        self.down: set[str] = set()
        # Members whose snapshot calls fail (their entry calls go through).
        self.snapshots_down: set[str] = set()
        # (address, whole) of each snapshot a member applied; addresses that refused one.
        self.snapshots_applied: list[tuple[str, bool]] = []
        self.snapshot_mismatches: list[str] = []
        # Members whose calls are never answered (cut off without a refusal).
        self.hanging: set[str] = set()
        self.calls = 0

    async def _answer(self, address: str) -> None:
        if address in self.hanging:
            await asyncio.Event().wait()

    def _copy(self, address: str) -> ReplicaLogs:
        if address in self.down:
            raise Unreachable(f"{address} is down")
        return self.copies[address]

    async def replicate(
        self, address, topic, epoch, ledger_id, first_entry_id, frames, lac, timeout_s=None
    ):
        self.calls += 1
        await asyncio.sleep(0)
        await self._answer(address)
        return await self._copy(address).append(
            STORAGE, epoch, ledger_id, first_entry_id, frames, lac
        )

    async def fence_replica(self, address, topic, epoch):
        return await self._copy(address).fence(STORAGE, epoch)

    async def trim_replica(self, address, topic, epoch, below_ledger_id):
        return await self._copy(address).trim(STORAGE, epoch, below_ledger_id)

    async def replicate_cursors(self, address, topic, epoch, states, deleted):
        self.calls += 1
        await self._answer(address)
        await self._copy(address).write_cursors(STORAGE, epoch, states, deleted)

    async def replicate_snapshot(self, address, topic, epoch, copy, timeout_s=None):
        await asyncio.sleep(0)
        if address in self.snapshots_down:
            raise Unreachable(f"{address} takes no snapshot now")
        try:
            await self._copy(address).write_snapshot(STORAGE, epoch, copy)
        except ReplicaSnapshotMismatchError:
            self.snapshot_mismatches.append(address)
            raise
        self.snapshots_applied.append((address, copy.whole))


def header(i: int) -> EntryHeader:
    return EntryHeader(publish_time_ms=1_000 + i, sequence_id=i, producer_name="p")


async def _writer(
    tmp_path: Path,
    peers: InProcessPeers,
    epoch: int = 1,
    remake=frozenset(),
    on_remade=None,
    throttle=None,
):
    opened: list[tuple[int, object]] = []

    async def open_ledger(ledger_id, closing):
        opened.append((ledger_id, closing))

    fenced: list[bool] = []
    # As a recovery hands them over: what each member answered the fence with.
    answers = {address: await copy.fence(STORAGE, epoch) for address, copy in peers.copies.items()}
    replication = EnsembleReplication(
        TOPIC,
        epoch,
        2,
        answers,
        peers,
        open_ledger,
        lambda: fenced.append(True),
        remake=remake,
        on_remade=on_remade or (lambda address: None),
        throttle=throttle,
    )
    ledger = await ManagedLedger.open(
        STORAGE,
        tmp_path / "writer",
        LocalStore(tmp_path / "writer-metadata"),
        ManagedLedgerConfig(fsync=False, max_entries_per_ledger=4),
        replication=replication,
    )
    return ledger, replication, fenced


async def _wait(condition, what: str, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)
    assert condition(), what


async def test_each_append_is_held_by_the_ack_quorum_and_the_copies_open_as_the_topic(tmp_path):
    peers = InProcessPeers(tmp_path, ["b", "c"])
    ledger, _replication, _ = await _writer(tmp_path, peers)
    positions = [await ledger.append(header(i), b"m%d" % i) for i in range(10)]
    assert positions[-1] == Position(2, 1)  # rolled over twice, 4 entries a ledger
    # Both followers catch up (only one was needed for each confirmation).
    await _wait(lambda: all(c.state(STORAGE).entry_count == 2 for c in peers.copies.values()), "")
    await ledger.close()
    for address, copy in peers.copies.items():
        copy.unload(STORAGE)
        reopened = await ManagedLedger.open(
            STORAGE,
            tmp_path / address / "ledgers" / STORAGE,
            copy.store,
            ManagedLedgerConfig(fsync=False),
        )
        entries = reopened.read(Position(0, 0), 100)
        assert [(e.position, e.payload) for e in entries] == [
            (p, b"m%d" % i) for i, p in enumerate(positions)
        ]
        assert [e.header.base_offset for e in entries] == list(range(10))
        await reopened.close()


async def test_one_follower_down_is_no_refusal_and_it_catches_up_from_the_files(tmp_path):
    peers = InProcessPeers(tmp_path, ["b", "c"])
    ledger, _replication, _ = await _writer(tmp_path, peers)
    await ledger.append(header(0), b"first")
    peers.down.add("c")
    for i in range(1, 7):
        await ledger.append(header(i), b"m%d" % i)
    assert peers.copies["c"].ledgers(STORAGE) == {0: 1}
    peers.down.clear()
    await _wait(
        lambda: peers.copies["c"].ledgers(STORAGE) == {0: 4, 1: 3},
        "the returning follower is sent what it missed, over the rollover",
    )
    await ledger.close()


async def test_below_the_ack_quorum_writes_are_refused_and_resume_by_themselves(tmp_path):
    peers = InProcessPeers(tmp_path, ["b", "c"])
    ledger, replication, _ = await _writer(tmp_path, peers)
    assert await ledger.append(header(0), b"kept") == Position(0, 0)
    peers.down.update({"b", "c"})
    with pytest.raises(NotEnoughReplicasError, match="ack quorum is 2"):
        await ledger.append(header(1), b"refused")
    # Refused at once now, without waiting on the members.
    with pytest.raises(NotEnoughReplicasError, match="1 of its 3 replicas are up"):
        await ledger.append(header(2), b"refused too")
    assert [e.payload for e in ledger.read(Position(0, 0), 10)] == [b"kept"]
    peers.down.discard("b")
    await _wait(lambda: replication.members_up >= 2, "a member back is probed and counted")
    position = await ledger.append(header(3), b"resumed")
    # The refused batch's ledger was closed below it: a new ledger, no id reused.
    assert position == Position(1, 0)
    await ledger.close()


async def test_a_member_fenced_at_a_higher_epoch_ends_this_writer(tmp_path):
    peers = InProcessPeers(tmp_path, ["b", "c"])
    ledger, _replication, fenced = await _writer(tmp_path, peers)
    await ledger.append(header(0), b"x")
    for copy in peers.copies.values():
        await copy.fence(STORAGE, 2)
    with pytest.raises((ReplicaFencedOutError, NotEnoughReplicasError)):
        await ledger.append(header(1), b"y")
    assert fenced == [True]
    with pytest.raises(ReplicaFencedOutError, match="taken by another broker"):
        await ledger.append(header(2), b"z")
    await ledger.close()


async def test_a_retired_writer_fails_what_waits_at_once_and_calls_no_member_again(tmp_path):
    """The write gate closed (the broker was fenced) while a batch waited for members
    that do not answer: retiring the writer fails it at once, not after the replicate
    timeout, and nothing more reaches any member at this epoch, so the topic's unload
    (the ledger's close) waits for none of them."""
    peers = InProcessPeers(tmp_path, ["b", "c"])
    ledger, replication, _ = await _writer(tmp_path, peers)
    await ledger.append(header(0), b"kept")
    peers.hanging.update({"b", "c"})
    waiting = asyncio.ensure_future(ledger.append(header(1), b"cut off"))
    await _wait(lambda: peers.calls >= 3, "the batch is sent to both members")
    started = asyncio.get_running_loop().time()
    replication.retire()
    with pytest.raises((ReplicaFencedOutError, NotEnoughReplicasError)):
        await waiting
    calls = peers.calls
    with pytest.raises(ReplicaFencedOutError, match="retired"):
        await ledger.append(header(2), b"after")
    with pytest.raises(ReplicaFencedOutError, match="retired"):
        await replication.replicate_cursors({"sub": b"{}"}, [])
    replication.trimmed(1)
    await ledger.close()
    assert asyncio.get_running_loop().time() - started < REPLICATE_TIMEOUT_S / 2
    assert peers.calls == calls, "a retired writer called a member"


async def test_the_copies_refuse_an_older_epoch_outright(tmp_path):
    peers = InProcessPeers(tmp_path, ["b"])
    await peers.copies["b"].fence(STORAGE, 5)
    with pytest.raises(ReplicaFencedError):
        await peers.replicate("b", TOPIC, 4, 0, 0, [], Position(0, -1))


async def test_a_member_whose_disk_was_lost_is_sent_every_ledger_from_the_first(tmp_path):
    peers = InProcessPeers(tmp_path, ["b", "c"])
    remade: list[str] = []
    ledger, _replication, _ = await _writer(
        tmp_path, peers, remake=frozenset({"c"}), on_remade=remade.append
    )
    peers.down.add("c")
    for i in range(10):  # three ledgers of 4, 4 and 2 entries, all while c is away
        await ledger.append(header(i), b"m%d" % i)
    # c comes back on an empty data dir.
    lost = peers.copies["c"]
    peers.copies["c"] = ReplicaLogs(
        LocalStore(tmp_path / "c-new" / "metadata"),
        lambda name: tmp_path / "c-new" / "ledgers" / name,
        LedgerFiles(64),
        fsync=False,
    )
    lost.close()
    peers.down.clear()
    await ledger.append(header(10), b"m10")
    await _wait(lambda: remade == ["c"], "the lost copy is made again, every ledger of it")
    assert peers.copies["c"].ledgers(STORAGE) == {0: 4, 1: 4, 2: 3}
    await ledger.close()


async def test_a_member_back_from_away_is_sent_every_cursor(tmp_path):
    peers = InProcessPeers(tmp_path, ["b", "c"])
    ledger, _replication, _ = await _writer(tmp_path, peers)
    await ledger.append(header(0), b"m0")
    peers.down.add("c")
    await ledger.append(header(1), b"m1")  # the writer finds c away
    cursor, _ = ledger.open_cursor("held-while-away", start_at_earliest=True)
    await ledger.write_cursor("held-while-away")
    key = f"{STORAGE}\x00held-while-away"
    assert peers.copies["c"].store.get(CURSORS_DB, key) is None
    peers.down.clear()
    await _wait(
        lambda: peers.copies["c"].store.get(CURSORS_DB, key) is not None,
        "the cursor written while c was away reaches it once it is back",
    )
    assert peers.copies["c"].store.get(CURSORS_DB, key) == cursor.to_json(
        ledger.config.max_persisted_acked_positions
    )
    await ledger.close()


async def test_ledgers_retention_deletes_are_deleted_from_the_copies_too(tmp_path):
    peers = InProcessPeers(tmp_path, ["b", "c"])
    ledger, _replication, _ = await _writer(tmp_path, peers)
    cursor, _ = ledger.open_cursor("all", start_at_earliest=True)
    for i in range(10):  # ledgers of 4, 4 and 2 entries
        await ledger.append(header(i), b"m%d" % i)
    cursor.ack_cumulative(Position(2, 1))
    assert ledger.trim() == [0, 1]
    await _wait(
        lambda: all(copy.ledgers(STORAGE) == {2: 2} for copy in peers.copies.values()),
        "the copies of the deleted ledgers deleted on every member",
    )
    await ledger.close()


async def test_a_member_that_holds_more_than_its_link_believes_is_asked_again(tmp_path):
    """A link whose idea of a member is behind (a recovery copied entries to it after
    its fence answer) resends entries the member holds and counts as confirmed, which
    it refuses; the link then asks the member what it holds and goes on from there."""
    peers = InProcessPeers(tmp_path, ["b", "c"])
    ledger, replication, _ = await _writer(tmp_path, peers)
    for i in range(6):  # ledger 0 full (4 entries), ledger 1 holds 2
        await ledger.append(header(i), b"m%d" % i)
    await _wait(lambda: peers.copies["b"].state(STORAGE).entry_count == 2, "b caught up")
    (link,) = [link for link in replication.links if link.address == "b"]
    link.held = (1, 0)  # stale: b holds 2 entries of ledger 1, the first confirmed
    peers.down.add("c")  # b's answer is needed for each confirmation now
    position = await asyncio.wait_for(ledger.append(header(6), b"m6"), REPLICATE_TIMEOUT_S)
    assert position == Position(1, 2)
    assert peers.copies["b"].state(STORAGE).entry_count == 3


# ------------------------------------------------------------ transaction buffer snapshots


async def _buffer(ledger: ManagedLedger) -> TransactionBuffer:
    """A READY buffer snapshotting at every change (transaction begun or ended)."""
    buffer = TransactionBuffer(ledger, SnapshotPolicy(every_changes=1))
    await buffer.recover()
    return buffer


async def _transactions(buffer: TransactionBuffer, first: int, count: int) -> None:
    """`count` transactions of one entry each, committed and aborted in turn."""
    for sequence in range(first, first + count):
        txn_id = TxnId(1, sequence)
        await buffer.before_append(txn_id)
        try:
            await buffer.ledger.append(
                EntryHeader(publish_time_ms=1, txn_id=txn_id), b"t%d" % sequence
            )
        finally:
            buffer.after_append(txn_id)
        await buffer.end(txn_id, sequence % 2 == 0, 0)


def _holds_writers_snapshot(peers: InProcessPeers, address: str, writer: LocalStore) -> bool:
    held = peers.copies[address].store
    return held_digest(held, STORAGE) == held_digest(writer, STORAGE) and list(
        held.scan_prefix(SNAPSHOTS_DB, STORAGE)
    ) == list(writer.scan_prefix(SNAPSHOTS_DB, STORAGE))


async def test_each_snapshot_reaches_the_members_and_one_taking_the_topic_replays_the_tail(
    tmp_path,
):
    peers = InProcessPeers(tmp_path, ["b", "c"])
    ledger, replication, _ = await _writer(tmp_path, peers)
    buffer = await _buffer(ledger)
    await _transactions(buffer, 1, 6)
    await _wait(
        lambda: all(_holds_writers_snapshot(peers, a, ledger.store) for a in ("b", "c")),
        "every member holds the writer's last snapshot, key for key",
    )
    # Changes were sent as changes on top of the snapshot each member held.
    await _wait(lambda: ("b", False) in peers.snapshots_applied, "b applied a change")
    assert replication.describe()["replicas"]["b"]["snapshotsSent"] > 0
    tail = [await ledger.append(header(i), b"after-%d" % i) for i in range(3)]
    await _wait(
        lambda: peers.copies["b"].ledgers(STORAGE).get(tail[-1].ledger_id, 0) > tail[-1].entry_id,
        "b holds the entries after the snapshot",
    )
    writer_state = (dict(buffer.aborted), buffer.max_read_position)
    buffer.close(snapshot=False)  # the writer dies: no last snapshot
    await ledger.close()

    copy = peers.copies["b"]
    copy.unload(STORAGE)
    promoted = await ManagedLedger.open(
        STORAGE, tmp_path / "b" / "ledgers" / STORAGE, copy.store, ManagedLedgerConfig(fsync=False)
    )
    recovered = await _buffer(promoted)
    assert recovered.recovered_from_snapshot
    assert recovered.replayed_entries == len(tail)  # only what follows the snapshot
    assert (dict(recovered.aborted), recovered.max_read_position) == writer_state
    assert sorted(t.least_bits for t in recovered.aborted) == [1, 3, 5]
    recovered.close(snapshot=False)
    await promoted.close()


async def test_a_member_that_missed_a_snapshot_change_is_sent_the_whole_snapshot(tmp_path):
    peers = InProcessPeers(tmp_path, ["b", "c"])
    ledger, _replication, _ = await _writer(tmp_path, peers)
    buffer = await _buffer(ledger)
    peers.snapshots_down.add("c")
    await _transactions(buffer, 1, 2)
    await _wait(lambda: _holds_writers_snapshot(peers, "b", ledger.store), "b holds it")
    assert held_digest(peers.copies["c"].store, STORAGE) == FIRST  # every send to c failed
    peers.snapshots_down.clear()
    await _transactions(buffer, 3, 1)
    await _wait(
        lambda: (
            ("c", True) in peers.snapshots_applied
            and _holds_writers_snapshot(peers, "c", ledger.store)
        ),
        "c refused the change on a state it does not hold, and was sent the whole",
    )
    assert "c" in peers.snapshot_mismatches
    buffer.close(snapshot=False)
    await ledger.close()


async def test_a_member_back_from_away_is_sent_the_whole_snapshot(tmp_path):
    peers = InProcessPeers(tmp_path, ["b", "c"])
    ledger, replication, _ = await _writer(tmp_path, peers)
    buffer = await _buffer(ledger)
    await _transactions(buffer, 1, 1)
    await _wait(lambda: _holds_writers_snapshot(peers, "c", ledger.store), "c holds it")
    peers.down.add("c")
    await _transactions(buffer, 2, 3)  # c is found away; snapshots skip it
    assert not _holds_writers_snapshot(peers, "c", ledger.store)
    peers.down.clear()
    await _wait(
        lambda: (
            ("c", True) in peers.snapshots_applied
            and _holds_writers_snapshot(peers, "c", ledger.store)
        ),
        "the member back from away is sent the snapshot whole",
    )
    assert replication.members_up == 3
    buffer.close(snapshot=False)
    await ledger.close()


async def test_a_cursor_write_a_member_missed_while_it_counted_as_up_reaches_it_later(tmp_path):
    """No entry told the writer the member was away: the failed cursor write itself
    does, so the member is sent every cursor once it answers, with no later change."""
    peers = InProcessPeers(tmp_path, ["b", "c"])
    ledger, replication, _ = await _writer(tmp_path, peers)
    await ledger.append(header(0), b"m0")
    await _wait(lambda: all(link.up for link in replication.links), "both members up")
    peers.down.add("c")
    ledger.open_cursor("missed", start_at_earliest=True)
    await ledger.write_cursor("missed")  # b and the writer hold it: the quorum
    key = f"{STORAGE}\x00missed"
    assert peers.copies["c"].store.get(CURSORS_DB, key) is None
    peers.down.clear()
    await _wait(
        lambda: peers.copies["c"].store.get(CURSORS_DB, key) is not None,
        "the cursor c missed reaches it once it answers again",
    )
    await ledger.close()


async def test_a_member_replaced_is_called_no_more_and_its_replacement_gets_every_ledger(
    tmp_path,
):
    """Re-replication: c is gone for good and d takes its place. d is sent every ledger
    from the writer's files (through the catch-up throttle) and every new entry, and
    counts toward the quorum once it holds everything confirmed; c hears nothing more."""
    peers = InProcessPeers(tmp_path, ["b", "c"])
    remade: list[str] = []
    throttle = CatchUpThrottle(10_000_000)
    ledger, replication, _ = await _writer(
        tmp_path, peers, on_remade=remade.append, throttle=throttle
    )
    for i in range(6):  # ledgers of 4 and 2 entries
        await ledger.append(header(i), b"m%d" % i)
    await _wait(lambda: peers.copies["c"].ledgers(STORAGE) == {0: 4, 1: 2}, "c holds all")
    peers.down.add("c")
    peers.copies["d"] = InProcessPeers(tmp_path, ["d"]).copies["d"]
    replication.replace_member("c", "d")
    assert replication.members == ["b", "d"]
    assert replication.describe()["replicas"]["d"]["beingRemade"]
    for i in range(6, 9):
        await ledger.append(header(i), b"m%d" % i)
    await _wait(lambda: remade == ["d"], "the replacement holds every ledger")
    await _wait(lambda: replication.members_up == 3, "and counts toward the quorum")
    # Every closed ledger whole on it (the last entry, if it was confirmed while d
    # caught up, comes with the next batch, as for any member back from away).
    assert {0: 4, 1: 4}.items() <= peers.copies["d"].ledgers(STORAGE).items()
    assert throttle.sent_bytes > 0, "old entries went through the throttle"
    described = replication.describe()
    assert described["ledgersBehind"] == 0 and not described["underReplicated"]
    assert described["replicas"]["d"]["catchUpBytes"] == throttle.sent_bytes
    # c is back, and is called no more: its copy stays as it was.
    peers.down.clear()
    await ledger.append(header(9), b"m9")
    await _wait(lambda: peers.copies["d"].ledgers(STORAGE) == {0: 4, 1: 4, 2: 2}, "d gets it")
    assert peers.copies["c"].ledgers(STORAGE) == {0: 4, 1: 2}
    await ledger.close()


async def test_a_member_that_joins_gets_every_ledger_while_the_others_keep_theirs(tmp_path):
    """An ensemble swap (ensemble_swaps.py): the record names d besides b and c; d is
    sent every ledger while b and c go on taking every entry (the quorum never counts
    on d's partial copy), then c leaves and is called no more."""
    peers = InProcessPeers(tmp_path, ["b", "c"])
    remade: list[str] = []
    ledger, replication, _ = await _writer(tmp_path, peers, on_remade=remade.append)
    for i in range(6):  # ledgers of 4 and 2 entries
        await ledger.append(header(i), b"m%d" % i)
    peers.copies["d"] = InProcessPeers(tmp_path, ["d"]).copies["d"]
    replication.follow(["b", "c", "d"])
    assert replication.members == ["b", "c", "d"]
    assert replication.describe()["replicas"]["d"]["beingRemade"]
    for i in range(6, 9):
        await ledger.append(header(i), b"m%d" % i)
    await _wait(lambda: remade == ["d"], "the new member holds every ledger")
    await _wait(lambda: replication.members_up == 4, "and counts toward the quorum")
    await _wait(
        lambda: peers.copies["c"].ledgers(STORAGE) == {0: 4, 1: 4, 2: 1}, "c kept up all along"
    )
    replication.follow(["b", "d"])
    assert replication.members == ["b", "d"]
    await ledger.append(header(9), b"m9")
    await _wait(lambda: peers.copies["d"].ledgers(STORAGE) == {0: 4, 1: 4, 2: 2}, "d gets it")
    await _wait(lambda: peers.copies["b"].ledgers(STORAGE) == {0: 4, 1: 4, 2: 2}, "b gets it")
    assert peers.copies["c"].ledgers(STORAGE) == {0: 4, 1: 4, 2: 1}  # called no more
    await ledger.close()
