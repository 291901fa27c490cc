"""TransactionCoordinator over a real LocalStore; only the participant (the broker's side
of ending a transaction on its topics) is a fake."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest

from managed_ledger import LocalStore, TxnId
from txnbuffer import (
    TooManyTransactionsError,
    TransactionCoordinator,
    TransactionEndedError,
    TransactionLimits,
    TransactionNotFoundError,
    TransactionNotOwnedError,
    TransactionTooLargeError,
    TxnAck,
    TxnMetadata,
    TxnState,
)
from txnbuffer.coordinator import COORDINATOR_DB, MAX_TIMEOUT_MS

COORDINATOR_ID = 7
LONG_TIMEOUT_MS = 60_000
WAIT_S = 5.0


def durable_state(store: LocalStore, txn_id: TxnId) -> TxnState | None:
    """The state a restarted coordinator would load for txn_id (its record in the log)."""
    for key, raw in store.scan_prefix(COORDINATOR_DB, "txn:"):
        if int(key.removeprefix("txn:")) == txn_id.least_bits:
            return TxnMetadata.from_json(txn_id, raw).state
    return None


async def eventually(condition: Callable[[], bool], message: str, timeout_s: float = WAIT_S):
    """Wait for a condition with a deadline (the coordinator has no event to wait on)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {message}")
        await asyncio.sleep(0.005)


@dataclass
class Call:
    topic: str
    txn_id: TxnId
    commit: bool
    low_watermark: int
    durable_state: TxnState | None  # what the coordinator log said when we were called
    live_state: TxnState | None
    fsynced_state: TxnState | None  # what the last fsync of the log had made durable


class FakeParticipant:
    """Records every end request; can fail the first N of them or hold them at a gate."""

    def __init__(self, store: LocalStore):
        self.store = store
        self.coordinator: TransactionCoordinator | None = None
        self.attempts: list[Call] = []
        self.ack_attempts: list[tuple[TxnAck, TxnId, bool, TxnState | None]] = []
        self.failures_left = 0
        self.gate: asyncio.Event | None = None
        self.fsynced: dict[TxnId, TxnState | None] = {}  # filled by tests that watch fsyncs
        self._changed = asyncio.Condition()

    def _live(self, txn_id: TxnId) -> TxnState | None:
        return self.coordinator.get(txn_id).state if self.coordinator else None

    async def end_on_topic(self, topic: str, txn_id: TxnId, commit: bool, low_watermark: int):
        self.attempts.append(
            Call(
                topic,
                txn_id,
                commit,
                low_watermark,
                durable_state(self.store, txn_id),
                self._live(txn_id),
                self.fsynced.get(txn_id),
            )
        )
        async with self._changed:
            self._changed.notify_all()
        if self.gate is not None:
            await self.gate.wait()
        if self.failures_left:
            self.failures_left -= 1
            raise RuntimeError(f"topic {topic} is unavailable")

    async def end_acks(self, ack: TxnAck, txn_id: TxnId, commit: bool) -> None:
        self.ack_attempts.append((ack, txn_id, commit, durable_state(self.store, txn_id)))

    async def wait_for_attempts(self, count: int) -> None:
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(lambda: len(self.attempts) >= count), WAIT_S
            )


@pytest.fixture
def participant(store: LocalStore) -> FakeParticipant:
    return FakeParticipant(store)


@pytest.fixture
async def coordinator(
    store: LocalStore, participant: FakeParticipant
) -> AsyncIterator[TransactionCoordinator]:
    tc = TransactionCoordinator(COORDINATOR_ID, store, participant)
    participant.coordinator = tc
    await tc.recover()
    yield tc
    await tc.close()


async def restarted(store: LocalStore, participant: FakeParticipant) -> TransactionCoordinator:
    tc = TransactionCoordinator(COORDINATOR_ID, store, participant)
    participant.coordinator = tc
    await tc.recover()
    return tc


def open_txn(coordinator: TransactionCoordinator, *topics: str) -> TxnId:
    txn_id = coordinator.new_transaction(LONG_TIMEOUT_MS)
    for topic in topics:
        coordinator.add_topic(txn_id, topic)
    return txn_id


# ---------------------------------------------------------------- ids


async def test_txn_ids_carry_the_coordinator_id_and_grow(coordinator):
    ids = [coordinator.new_transaction(LONG_TIMEOUT_MS) for _ in range(5)]
    assert all(t.most_bits == COORDINATOR_ID for t in ids)
    sequences = [t.least_bits for t in ids]
    assert sequences == sorted(set(sequences))
    assert sequences[0] >= 1


async def test_sequences_are_never_reused_across_a_restart(store):
    first = await restarted(store, FakeParticipant(store))
    before = [first.new_transaction(LONG_TIMEOUT_MS) for _ in range(3)]
    await first.close()

    second = await restarted(store, FakeParticipant(store))
    after_clean = second.new_transaction(LONG_TIMEOUT_MS)
    # No close this time: a crash right after handing out an id.
    third = await restarted(store, FakeParticipant(store))
    after_crash = third.new_transaction(LONG_TIMEOUT_MS)
    await second.close()
    await third.close()

    assert after_clean.least_bits > max(t.least_bits for t in before)
    assert after_crash.least_bits > after_clean.least_bits


# ---------------------------------------------------------------- ending


@pytest.mark.parametrize(
    ("commit", "decided", "final"),
    [(True, TxnState.COMMITTING, TxnState.COMMITTED), (False, TxnState.ABORTING, TxnState.ABORTED)],
)
async def test_decision_is_durable_before_participants_are_called(
    coordinator, participant, store, commit, decided, final
):
    txn_id = open_txn(coordinator, "a", "b")
    coordinator.add_ack(txn_id, "c", "sub", [(0, 1, 0)])
    assert durable_state(store, txn_id) is TxnState.OPEN

    assert await coordinator.end(txn_id, commit) is final

    assert sorted(c.topic for c in participant.attempts) == ["a", "b"]
    assert all(c.commit is commit for c in participant.attempts)
    assert all(c.durable_state is decided for c in participant.attempts)
    assert [(a.topic, commit_, state) for a, _, commit_, state in participant.ack_attempts] == [
        ("c", commit, decided)
    ]
    assert durable_state(store, txn_id) is final
    assert coordinator.get(txn_id).state is final


async def test_decisions_are_fsynced_before_any_marker_and_share_fsyncs(
    coordinator, participant, store, monkeypatch
):
    txn_ids = [open_txn(coordinator, f"topic-{i}") for i in range(5)]
    fsyncs = 0
    real_sync = store.sync

    def counting_sync() -> None:
        nonlocal fsyncs
        real_sync()
        fsyncs += 1
        participant.fsynced = {t: durable_state(store, t) for t in txn_ids}

    monkeypatch.setattr(store, "sync", counting_sync)

    ends = [coordinator.end(t, commit=i % 2 == 0) for i, t in enumerate(txn_ids)]
    finals = await asyncio.wait_for(asyncio.gather(*ends), WAIT_S)

    assert finals == [TxnState.COMMITTED, TxnState.ABORTED] * 2 + [TxnState.COMMITTED]
    assert len(participant.attempts) == len(txn_ids)
    for call in participant.attempts:
        assert call.fsynced_state is (TxnState.COMMITTING if call.commit else TxnState.ABORTING)
    assert fsyncs < len(txn_ids)  # decisions made together share an fsync


@pytest.mark.parametrize("first_commit", [True, False])
@pytest.mark.parametrize("again_commit", [True, False])
async def test_end_of_an_ended_txn_raises_transaction_ended(
    coordinator, participant, first_commit, again_commit
):
    txn_id = open_txn(coordinator, "a")
    await coordinator.end(txn_id, first_commit)
    with pytest.raises(TransactionEndedError):
        await coordinator.end(txn_id, again_commit)
    assert len(participant.attempts) == 1


async def test_end_of_an_unknown_txn_raises_not_found(coordinator):
    with pytest.raises(TransactionNotFoundError):
        await coordinator.end(TxnId(COORDINATOR_ID, 999_999), True)
    with pytest.raises(TransactionNotFoundError):
        await coordinator.end(TxnId(COORDINATOR_ID + 1, 1), False)


async def test_an_ended_txn_accepts_no_more_topics_or_acks(coordinator):
    txn_id = open_txn(coordinator, "a")
    await coordinator.end(txn_id, True)
    with pytest.raises(TransactionEndedError):
        coordinator.add_topic(txn_id, "b")
    with pytest.raises(TransactionEndedError):
        coordinator.add_ack(txn_id, "b", "sub", [(0, 0, 0)])


async def test_a_decided_txn_never_changes_its_mind(coordinator, participant):
    participant.gate = asyncio.Event()
    txn_id = open_txn(coordinator, "a")
    committing = asyncio.create_task(coordinator.end(txn_id, True))
    await participant.wait_for_attempts(1)

    with pytest.raises(TransactionEndedError):
        await coordinator.end(txn_id, False)
    retry = asyncio.create_task(coordinator.end(txn_id, True))  # same decision: joins
    participant.gate.set()
    assert await asyncio.wait_for(committing, WAIT_S) is TxnState.COMMITTED
    assert await asyncio.wait_for(retry, WAIT_S) is TxnState.COMMITTED
    assert all(c.commit for c in participant.attempts)


async def test_a_failing_participant_is_retried_until_it_succeeds(coordinator, participant, store):
    participant.failures_left = 2
    txn_id = open_txn(coordinator, "a")
    assert await asyncio.wait_for(coordinator.end(txn_id, True), WAIT_S) is TxnState.COMMITTED
    assert len(participant.attempts) == 3
    assert all(c.commit and c.durable_state is TxnState.COMMITTING for c in participant.attempts)
    assert durable_state(store, txn_id) is TxnState.COMMITTED


# ---------------------------------------------------------------- timeouts


@pytest.mark.parametrize("timeout_ms", [0, -1, -60_000, MAX_TIMEOUT_MS + 1])
async def test_timeout_out_of_range_raises_value_error(coordinator, timeout_ms):
    with pytest.raises(ValueError, match="timeout"):
        coordinator.new_transaction(timeout_ms)


async def test_a_timeout_aborts_the_txn(coordinator, participant, store):
    txn_id = coordinator.new_transaction(50)
    coordinator.add_topic(txn_id, "a")

    await participant.wait_for_attempts(1)
    call = participant.attempts[0]
    assert (call.txn_id, call.commit) == (txn_id, False)
    assert call.live_state is TxnState.TIMEOUT
    assert call.durable_state is TxnState.TIMEOUT

    await eventually(lambda: coordinator.get(txn_id).state is TxnState.ABORTED, "ABORTED")
    assert durable_state(store, txn_id) is TxnState.ABORTED
    assert coordinator.timed_out_count == 1
    assert coordinator.aborted_count == 1
    with pytest.raises(TransactionEndedError):
        await coordinator.end(txn_id, True)


async def test_an_ended_txn_does_not_time_out(coordinator, participant):
    txn_id = coordinator.new_transaction(20)
    coordinator.add_topic(txn_id, "a")
    await coordinator.end(txn_id, True)
    # Timers fire in deadline order: once a later one has fired, the earlier would have.
    later = coordinator.new_transaction(60)
    coordinator.add_topic(later, "b")
    await participant.wait_for_attempts(2)
    assert [(c.txn_id, c.commit) for c in participant.attempts] == [(txn_id, True), (later, False)]
    assert coordinator.get(txn_id).state is TxnState.COMMITTED


# ---------------------------------------------------------------- low watermark


async def test_low_watermark_is_the_highest_sequence_below_every_open_txn(coordinator, participant):
    assert coordinator.low_watermark == 0
    t1, t2, t3 = (open_txn(coordinator, "a") for _ in range(3))
    assert coordinator.low_watermark == t1.least_bits - 1

    await coordinator.end(t2, True)  # a hole above the oldest open txn changes nothing
    assert coordinator.low_watermark == t1.least_bits - 1

    await coordinator.end(t1, False)
    assert coordinator.low_watermark == t3.least_bits - 1

    await coordinator.end(t3, True)
    assert coordinator.low_watermark == t3.least_bits

    # Each end carried the watermark of its moment, always below its own sequence.
    sent = {c.txn_id: c.low_watermark for c in participant.attempts}
    assert sent == {t2: t1.least_bits - 1, t1: t1.least_bits - 1, t3: t3.least_bits - 1}
    assert all(w < t.least_bits for t, w in sent.items())


async def test_low_watermark_never_covers_a_txn_left_open_by_a_restart(store, participant):
    first = await restarted(store, participant)
    done = open_txn(first, "a")
    still_open = open_txn(first, "a")
    await first.end(done, True)
    await first.close()

    second = await restarted(store, participant)
    try:
        assert second.low_watermark == still_open.least_bits - 1
        newer = second.new_transaction(LONG_TIMEOUT_MS)
        await second.end(still_open, False)
        assert second.low_watermark == newer.least_bits - 1
    finally:
        await second.close()


# ---------------------------------------------------------------- recovery


@pytest.mark.parametrize(
    ("commit", "decided", "final"),
    [(True, TxnState.COMMITTING, TxnState.COMMITTED), (False, TxnState.ABORTING, TxnState.ABORTED)],
)
async def test_recover_redrives_a_decided_txn_left_by_a_crash(store, commit, decided, final):
    # The first coordinator logs its decision, then "crashes" while ending the txn.
    stuck = FakeParticipant(store)
    stuck.gate = asyncio.Event()  # never set
    first = await restarted(store, stuck)
    txn_id = open_txn(first, "a", "b")
    ending = asyncio.create_task(first.end(txn_id, commit))
    await stuck.wait_for_attempts(2)
    await first.close()  # cancels the driver: the completion is never logged
    with contextlib.suppress(asyncio.CancelledError):
        await ending
    assert durable_state(store, txn_id) is decided

    participant = FakeParticipant(store)
    second = await restarted(store, participant)
    try:
        await participant.wait_for_attempts(2)
        assert sorted(c.topic for c in participant.attempts) == ["a", "b"]
        assert all(c.commit is commit and c.txn_id == txn_id for c in participant.attempts)
        await eventually(lambda: second.get(txn_id).state is final, final.value)
        assert durable_state(store, txn_id) is final
        with pytest.raises(TransactionEndedError):
            await second.end(txn_id, not commit)
    finally:
        await second.close()


async def test_recover_rearms_the_timeout_of_a_txn_left_open(store):
    first = await restarted(store, FakeParticipant(store))
    txn_id = first.new_transaction(50)
    first.add_topic(txn_id, "a")
    await first.close()  # down before the timeout fired

    participant = FakeParticipant(store)
    second = await restarted(store, participant)
    try:
        await participant.wait_for_attempts(1)
        assert participant.attempts[0].commit is False
        await eventually(lambda: second.get(txn_id).state is TxnState.ABORTED, "ABORTED")
    finally:
        await second.close()


# ---------------------------------------------------------------- named transactions


async def test_a_named_transaction_is_joined_while_open_or_committed(coordinator):
    first = coordinator.named_transaction("query-7-batch-3", LONG_TIMEOUT_MS)
    again = coordinator.named_transaction("query-7-batch-3", LONG_TIMEOUT_MS)
    assert again is first and first.state is TxnState.OPEN
    other = coordinator.named_transaction("query-7-batch-4", LONG_TIMEOUT_MS)
    assert other.txn_id != first.txn_id

    assert await asyncio.wait_for(coordinator.end(first.txn_id, True), WAIT_S) is (
        TxnState.COMMITTED
    )
    replayed = coordinator.named_transaction("query-7-batch-3", LONG_TIMEOUT_MS)
    assert replayed.txn_id == first.txn_id and replayed.state is TxnState.COMMITTED


async def test_an_aborted_name_gets_a_new_transaction(coordinator):
    first = coordinator.named_transaction("retry-me", LONG_TIMEOUT_MS)
    await asyncio.wait_for(coordinator.end(first.txn_id, False), WAIT_S)
    second = coordinator.named_transaction("retry-me", LONG_TIMEOUT_MS)
    assert second.txn_id != first.txn_id and second.state is TxnState.OPEN


async def test_names_survive_a_restart(store, participant):
    before = await restarted(store, participant)
    open_one = before.named_transaction("still-open", LONG_TIMEOUT_MS)
    committed = before.named_transaction("done", LONG_TIMEOUT_MS)
    await asyncio.wait_for(before.end(committed.txn_id, True), WAIT_S)
    await before.close()

    after = await restarted(store, participant)
    assert after.named_transaction("still-open", LONG_TIMEOUT_MS).txn_id == open_one.txn_id
    done = after.named_transaction("done", LONG_TIMEOUT_MS)
    assert (done.txn_id, done.state) == (committed.txn_id, TxnState.COMMITTED)
    await after.close()


@pytest.mark.parametrize("name", ["", "x" * 257])
async def test_a_transaction_name_must_have_1_to_256_characters(coordinator, name):
    with pytest.raises(ValueError, match="1 to 256"):
        coordinator.named_transaction(name, LONG_TIMEOUT_MS)


# ---------------------------------------------------------------- limits


@pytest.fixture
async def limited(store: LocalStore, participant: FakeParticipant):
    tc = TransactionCoordinator(
        COORDINATOR_ID, store, participant, TransactionLimits(max_open=3, max_open_per_owner=2)
    )
    participant.coordinator = tc
    await tc.recover()
    yield tc
    await tc.close()


async def test_an_owner_past_its_open_transaction_limit_is_refused_until_one_ends(limited):
    first = limited.new_transaction(LONG_TIMEOUT_MS, owner="a")
    limited.new_transaction(LONG_TIMEOUT_MS, owner="a")
    reserved = len(list(limited.store.scan_prefix(COORDINATOR_DB, "txn:")))
    with pytest.raises(TooManyTransactionsError, match=r"client a .*max_open_transactions_per"):
        limited.new_transaction(LONG_TIMEOUT_MS, owner="a")
    assert len(list(limited.store.scan_prefix(COORDINATOR_DB, "txn:"))) == reserved
    limited.new_transaction(LONG_TIMEOUT_MS, owner="b")  # another owner still may

    assert await limited.end(first, commit=False) is TxnState.ABORTED
    assert limited.open_by("a") == 1
    limited.new_transaction(LONG_TIMEOUT_MS, owner="a")


async def test_the_coordinator_refuses_past_max_open_whoever_asks(limited):
    for owner in ("a", "b", ""):
        limited.new_transaction(LONG_TIMEOUT_MS, owner=owner)
    with pytest.raises(TooManyTransactionsError, match="max_open_transactions allows"):
        limited.new_transaction(LONG_TIMEOUT_MS, owner="c")
    with pytest.raises(TooManyTransactionsError):
        limited.named_transaction("job-1", LONG_TIMEOUT_MS, owner="c")
    assert limited.stats()["openTxns"] == 3


async def test_a_timed_out_transaction_frees_its_owners_slot(limited):
    limited.new_transaction(50, owner="a")
    limited.new_transaction(50, owner="a")
    await eventually(lambda: limited.open_by("a") == 0, "both transactions to time out")
    limited.new_transaction(LONG_TIMEOUT_MS, owner="a")
    assert limited.timed_out_count == 2


# ---------------------------------------------------------------- forgetting ended transactions

RETENTION_S = 60.0
MAX_ENDED = 3


class FakeClock:
    """Wall-clock seconds that move only when a test says so."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def bounded_coordinator(
    store: LocalStore, participant: FakeParticipant, clock: FakeClock
) -> TransactionCoordinator:
    tc = TransactionCoordinator(
        COORDINATOR_ID,
        store,
        participant,
        TransactionLimits(ended_retention_s=RETENTION_S, max_ended=MAX_ENDED),
        clock=clock,
    )
    participant.coordinator = tc
    await tc.recover()
    return tc


@pytest.fixture
async def bounded(store, participant, clock) -> AsyncIterator[TransactionCoordinator]:
    tc = await bounded_coordinator(store, participant, clock)
    yield tc
    await tc.close()


def record_keys(store: LocalStore, sequence: int) -> list[str]:
    """The log's records of one transaction: its own and its acks'."""
    own = f"txn:{sequence:020d}"
    acks = f"ack:{sequence:020d}:"
    return [
        key
        for prefix in ("txn:", "ack:")
        for key, _ in store.scan_prefix(COORDINATOR_DB, prefix)
        if key == own or key.startswith(acks)
    ]


async def ended_txn(coordinator: TransactionCoordinator, commit: bool = True) -> TxnId:
    txn_id = open_txn(coordinator, "a")
    coordinator.add_ack(txn_id, "b", "sub", [(0, 1, 0)])
    await asyncio.wait_for(coordinator.end(txn_id, commit), WAIT_S)
    return txn_id


async def test_an_ended_txn_is_forgotten_once_past_the_retention(bounded, clock):
    txn_id = await ended_txn(bounded)
    clock.now += RETENTION_S  # exactly the retention: still remembered
    assert bounded.get(txn_id).state is TxnState.COMMITTED

    clock.now += 1
    with pytest.raises(TransactionNotFoundError, match=r"more than 60 s ago \(txn_ended_ret"):
        bounded.get(txn_id)
    with pytest.raises(TransactionNotFoundError):
        await bounded.end(txn_id, True)
    assert bounded.stats()["endedTxns"] == 0


async def test_only_the_latest_max_ended_txns_are_remembered(bounded):
    ended = [await ended_txn(bounded, commit=i % 2 == 0) for i in range(MAX_ENDED + 2)]
    for forgotten in ended[:2]:
        with pytest.raises(TransactionNotFoundError, match=r"latest 3 ended .*max_ended_trans"):
            bounded.get(forgotten)
    assert [bounded.get(t).state for t in ended[2:]] == [
        TxnState.COMMITTED,
        TxnState.ABORTED,
    ] * 1 + [TxnState.COMMITTED]
    assert bounded.stats()["endedTxns"] == MAX_ENDED


async def test_an_id_never_handed_out_is_not_found_as_never_opened(bounded):
    with pytest.raises(TransactionNotFoundError, match=r"never opened$"):
        bounded.get(TxnId(COORDINATOR_ID, 10**9))


@pytest.mark.parametrize("commit", [True, False])
async def test_a_late_duplicate_end_of_a_remembered_txn_answers_as_before(
    bounded, clock, participant, commit
):
    txn_id = await ended_txn(bounded, commit)
    for _ in range(MAX_ENDED - 1):  # others end, but not enough to push it out
        await ended_txn(bounded)
    clock.now += RETENTION_S / 2
    with pytest.raises(TransactionEndedError, match="already"):
        await bounded.end(txn_id, commit)
    with pytest.raises(TransactionEndedError):
        await bounded.end(txn_id, not commit)
    assert bounded.get(txn_id).describe()["status"] == ("COMMITTED" if commit else "ABORTED")
    assert sum(c.txn_id == txn_id for c in participant.attempts) == 1


async def test_a_forgotten_committed_name_gets_a_new_transaction(bounded, clock):
    first = bounded.named_transaction("query-1-batch-1", LONG_TIMEOUT_MS)
    await asyncio.wait_for(bounded.end(first.txn_id, True), WAIT_S)
    assert bounded.named_transaction("query-1-batch-1", LONG_TIMEOUT_MS) is first

    clock.now += RETENTION_S + 1
    again = bounded.named_transaction("query-1-batch-1", LONG_TIMEOUT_MS)
    assert again.txn_id != first.txn_id and again.state is TxnState.OPEN
    assert bounded._by_name == {("", "query-1-batch-1"): again.txn_id.least_bits}


async def test_an_open_named_txn_outlives_any_number_of_ends(bounded):
    named = bounded.named_transaction("long-running", LONG_TIMEOUT_MS)
    for _ in range(MAX_ENDED * 3):
        await ended_txn(bounded)
    assert bounded.named_transaction("long-running", LONG_TIMEOUT_MS) is named


async def test_finished_end_tasks_are_dropped(bounded):
    for _ in range(5):
        await ended_txn(bounded)
    assert bounded._drivers == {}


async def test_records_of_forgotten_txns_are_deleted_with_the_next_write(bounded, store):
    forgotten = await ended_txn(bounded)
    assert len(record_keys(store, forgotten.least_bits)) == 2  # its record and its ack's
    writes = 0
    real_write_many = store.write_many

    def counting_write_many(*args, **kwargs) -> None:
        nonlocal writes
        writes += 1
        real_write_many(*args, **kwargs)

    store.write_many = counting_write_many
    kept = [await ended_txn(bounded) for _ in range(MAX_ENDED)]
    store.write_many = real_write_many

    assert record_keys(store, forgotten.least_bits) == []
    assert all(len(record_keys(store, t.least_bits)) == 2 for t in kept)
    # open, topic, ack, decision, completion: the deletion took no write of its own
    assert writes == 5 * MAX_ENDED


async def test_recovery_forgets_and_deletes_what_is_past_either_bound(store, participant, clock):
    first = await bounded_coordinator(store, participant, clock)
    pushed_out = await ended_txn(first)
    clock.now += RETENTION_S / 2
    ended = []
    for _ in range(MAX_ENDED):  # one a second
        clock.now += 1
        ended.append(await ended_txn(first))
    first_end = clock.now - MAX_ENDED + 1
    still_open = open_txn(first, "a")
    await first.close()
    assert record_keys(store, pushed_out.least_bits) == []  # deleted with a completion

    second = await bounded_coordinator(store, participant, clock)
    assert [second.get(t).state for t in ended] == [TxnState.COMMITTED] * MAX_ENDED
    await second.close()

    clock.now = first_end + RETENTION_S + 0.5  # the first of `ended` is past the retention
    third = await bounded_coordinator(store, participant, clock)
    try:
        with pytest.raises(TransactionNotFoundError):
            third.get(ended[0])
        assert record_keys(store, ended[0].least_bits) == []
        assert [third.get(t).state for t in ended[1:]] == [TxnState.COMMITTED] * (MAX_ENDED - 1)
        assert third.get(still_open).state is TxnState.OPEN
    finally:
        await third.close()


# ---------------------------------------------------------------- acks in the log


async def test_each_ack_is_a_record_of_its_own_and_recovery_reads_them_back(store, participant):
    first = await restarted(store, participant)
    txn_id = open_txn(first, "a")
    acks = [
        ("t1", "s1", [(1, 2, 0)]),
        ("t2", "s2", [(3, 4, 0), (3, 5, -1)]),
        ("t1", "s1", [(1, 3, 0)]),
    ]
    for topic, subscription, ids in acks:
        first.add_ack(txn_id, topic, subscription, ids)
    await first.close()
    assert record_keys(store, txn_id.least_bits) == [
        f"txn:{txn_id.least_bits:020d}",
        *(f"ack:{txn_id.least_bits:020d}:{i:08d}" for i in range(3)),
    ]

    participant = FakeParticipant(store)
    second = await restarted(store, participant)
    try:
        recovered = second.get(txn_id).acks
        assert [(a.topic, a.subscription, a.message_ids) for a in recovered] == acks
        assert await asyncio.wait_for(second.end(txn_id, True), WAIT_S) is TxnState.COMMITTED
        assert [(a.topic, a.message_ids) for a, *_ in participant.ack_attempts] == [
            (t, ids) for t, _, ids in acks
        ]
    finally:
        await second.close()


async def test_an_ack_writes_the_same_bytes_however_many_came_before(coordinator, store):
    txn_id = open_txn(coordinator, "a")
    written: list[int] = []
    real_write_many = store.write_many

    def measuring_write_many(db, puts, deletes=()) -> None:
        written.append(sum(len(k) + len(v) for k, v in puts.items()))
        real_write_many(db, puts, deletes)

    store.write_many = measuring_write_many
    for entry in range(500):
        coordinator.add_ack(txn_id, "topic", "sub", [(7, entry % 10, 0)])
    store.write_many = real_write_many
    assert len(written) == 500
    assert max(written) == min(written) < 200


async def test_a_record_of_the_older_layout_with_inline_acks_loads_and_is_rewritten(store):
    sequence = 42
    old_record = {
        "state": "COMMITTING",
        "timeout_ms": LONG_TIMEOUT_MS,
        "opened_ms": int(time.time() * 1000),
        "topics": ["a"],
        "acks": [["t", "s", [[1, 2, 0]]], ["t", "s", [[1, 3, -1]]]],
        "ended_ms": 0,
        "name": "",
    }
    store.put_json(COORDINATOR_DB, f"txn:{sequence:020d}", old_record)
    # One that ended two retentions ago: forgotten, not rewritten.
    long_ago_ms = int(time.time() * 1000) - 2 * 3600 * 1000
    expired = {
        **old_record,
        "state": "COMMITTED",
        "opened_ms": long_ago_ms,
        "ended_ms": long_ago_ms,
    }
    store.put_json(COORDINATOR_DB, f"txn:{sequence + 1:020d}", expired)
    store.put(COORDINATOR_DB, f"sequence:{COORDINATOR_ID}", b"1000")

    participant = FakeParticipant(store)
    tc = await restarted(store, participant)
    try:
        txn_id = TxnId(COORDINATOR_ID, sequence)
        await eventually(lambda: tc.get(txn_id).state is TxnState.COMMITTED, "re-driven commit")
        assert [(a.topic, a.message_ids) for a, *_ in participant.ack_attempts] == [
            ("t", [(1, 2, 0)]),
            ("t", [(1, 3, -1)]),
        ]
        assert "acks" not in store.get_json(COORDINATOR_DB, f"txn:{sequence:020d}")
        assert [
            TxnAck.from_json(raw).message_ids
            for _, raw in store.scan_prefix(COORDINATOR_DB, f"ack:{sequence:020d}:")
        ] == [[(1, 2, 0)], [(1, 3, -1)]]
        assert record_keys(store, sequence + 1) == []
        with pytest.raises(TransactionNotFoundError):
            tc.get(TxnId(COORDINATOR_ID, sequence + 1))
    finally:
        await tc.close()


# ---------------------------------------------------------------- owners


async def test_only_the_owner_ends_adds_to_or_reads_a_transaction_and_a_refusal_changes_nothing(
    coordinator, participant, store
):
    txn_id = coordinator.new_transaction(LONG_TIMEOUT_MS, owner="alice")
    coordinator.add_topic(txn_id, "t1", caller="alice")
    before = dict(store.scan_prefix(COORDINATOR_DB, ""))
    with pytest.raises(TransactionNotOwnedError, match="belongs to another role"):
        await coordinator.end(txn_id, commit=True, caller="mallory")
    with pytest.raises(TransactionNotOwnedError):
        coordinator.add_topic(txn_id, "t2", caller="mallory")
    with pytest.raises(TransactionNotOwnedError):
        coordinator.add_ack(txn_id, "t1", "sub", [(1, 0, -1)], caller="mallory")
    with pytest.raises(TransactionNotOwnedError):
        coordinator.owned(txn_id, "mallory")
    assert dict(store.scan_prefix(COORDINATOR_DB, "")) == before
    assert coordinator.get(txn_id).state is TxnState.OPEN and participant.attempts == []
    # No caller (a superuser) passes; the owner does.
    assert coordinator.owned(txn_id, None).owner == "alice"
    assert await asyncio.wait_for(coordinator.end(txn_id, True, caller="alice"), WAIT_S) is (
        TxnState.COMMITTED
    )


async def test_the_owner_is_recorded_with_the_transaction_and_survives_a_restart(
    store, participant
):
    before = await restarted(store, participant)
    txn_id = before.new_transaction(LONG_TIMEOUT_MS, owner="alice")
    await before.close()
    after = await restarted(store, participant)
    assert after.get(txn_id).owner == "alice"
    assert after.get(txn_id).describe()["owner"] == "alice"
    with pytest.raises(TransactionNotOwnedError):
        await after.end(txn_id, commit=False, caller="mallory")
    # A recovered open transaction still counts against its owner's limit.
    assert after.open_by("alice") == 1
    await after.close()


async def test_a_record_without_an_owner_loads_as_anonymous(store, participant):
    txn_id = TxnId(COORDINATOR_ID, 5)
    record = b'{"state":"OPEN","timeout_ms":60000,"opened_ms":1,"topics":[],"ended_ms":0,"name":""}'
    store.put(COORDINATOR_DB, "txn:" + f"{5:020d}", record)
    recovered = await restarted(store, participant)
    assert recovered.get(txn_id).owner == ""
    assert recovered.get(txn_id).describe()["owner"] is None
    await recovered.close()


async def test_names_are_per_owner(coordinator):
    alices = coordinator.named_transaction("payroll", LONG_TIMEOUT_MS, owner="alice")
    bobs = coordinator.named_transaction("payroll", LONG_TIMEOUT_MS, owner="bob")
    assert alices.txn_id != bobs.txn_id
    assert (alices.owner, bobs.owner) == ("alice", "bob")
    assert coordinator.named_transaction("payroll", LONG_TIMEOUT_MS, owner="alice") is alices


async def test_the_limit_counts_per_client_which_defaults_to_the_owner(limited):
    # With everyone anonymous the broker counts per connection: client given apart.
    limited.new_transaction(LONG_TIMEOUT_MS, owner="", client="conn-1")
    limited.new_transaction(LONG_TIMEOUT_MS, owner="", client="conn-1")
    with pytest.raises(TooManyTransactionsError, match="client conn-1"):
        limited.new_transaction(LONG_TIMEOUT_MS, owner="", client="conn-1")
    limited.new_transaction(LONG_TIMEOUT_MS, owner="alice")
    assert limited.open_by("alice") == 1 and limited.open_by("conn-1") == 2


async def test_acks_per_transaction_are_bounded_and_a_refused_ack_records_nothing(
    store, participant
):
    tc = TransactionCoordinator(
        COORDINATOR_ID, store, participant, TransactionLimits(max_acks_per_txn=3)
    )
    participant.coordinator = tc
    await tc.recover()
    txn_id = tc.new_transaction(LONG_TIMEOUT_MS)
    tc.add_ack(txn_id, "t", "s", [(1, 0, -1), (1, 1, -1)])
    with pytest.raises(TransactionTooLargeError, match="max_acks_per_txn"):
        tc.add_ack(txn_id, "t", "s", [(1, 2, -1), (1, 3, -1)])
    with pytest.raises(TransactionTooLargeError):
        tc.check_ack(txn_id, None, 2)
    tc.add_ack(txn_id, "t", "s", [(1, 2, -1)])  # up to the limit
    assert tc.get(txn_id).acked_ids == 3
    await tc.close()
    recovered = await restarted(store, participant)
    assert recovered.get(txn_id).acked_ids == 3
    await recovered.close()


async def test_coordinators_with_their_own_key_prefixes_share_a_store_and_recover_apart(
    store: LocalStore, participant: FakeParticipant
):
    first = TransactionCoordinator(0, store, participant)
    second = TransactionCoordinator(1, store, participant, key_prefix="shard-1/")
    await first.recover()
    await second.recover()
    open_first = first.new_transaction(60_000)
    committed_second = second.new_transaction(60_000)
    second.add_topic(committed_second, "t")
    open_second = second.new_transaction(60_000)
    await second.end(committed_second, commit=True)
    await first.close()
    await second.close()

    first, second = (
        TransactionCoordinator(0, store, participant),
        TransactionCoordinator(1, store, participant, key_prefix="shard-1/"),
    )
    await first.recover()
    await second.recover()
    try:
        assert [meta.txn_id for meta in first.list_open()] == [open_first]
        assert [meta.txn_id for meta in second.list_open()] == [open_second]
        assert second.get(committed_second).state is TxnState.COMMITTED
        with pytest.raises(TransactionNotFoundError):
            first.get(committed_second)
        # Sequences are each coordinator's own, both starting past their reserved block.
        assert first.new_transaction(60_000).most_bits == 0
        assert second.new_transaction(60_000).most_bits == 1
    finally:
        await first.close()
        await second.close()
