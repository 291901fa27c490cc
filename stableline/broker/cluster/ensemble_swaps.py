"""A topic's copy moved to a broker outside its ensemble, so that a broker that joins
can take existing load: the balancer (balancer.py) asks for it when the best broker
to relieve a hot one holds no copy of the topic.

Promises:
- The ensemble first grows by the new member and shrinks again by the member
  `leaving` only once every other member holds its copy: the topic never has fewer
  whole copies than before the swap (never fewer than its write quorum), and a
  failover meanwhile counts the new member's copy only once it is whole (its data
  dir is recorded with COPYING_PREFIX until then, as for a replaced member's).
- One swap a topic at a time, of a replicated topic, never of its leader (the
  leader leaves by a transfer, topic_moves.py).
- Each step is a compare-and-set of the ownership record: `start_copy` by any broker
  (the balancer's); `next_step` by the topic's writer, on each re-replication pass
  (rereplication.py), which also makes its replication follow the record's ensemble
  (a link for the new member, sent every ledger; the leaving one's closed; the
  leaving broker drops its copy when it sees the record).
- A copy that cannot complete (the new member gone) is abandoned: the new member
  is taken out and the ensemble is as before. A leaving member gone meanwhile
  leaves at once (its copy was to go anyway); another member gone (the leader that
  made the swap, after a failover) leaves in its place. A leaving member that took
  the topic hands it over to another member first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from stableline.broker.cluster.ownership import (
    COPYING_PREFIX,
    OwnershipRecord,
    RecordChangedError,
    TopicOwnership,
)
from stableline.topic_name import TopicName


def copying(record: OwnershipRecord) -> list[str]:
    """The members whose copies are being made (not counted on yet)."""
    return [m for m in record.ensemble if record.data_dirs.get(m, "").startswith(COPYING_PREFIX)]


def with_copy_started(
    record: OwnershipRecord, target: str, target_data_dir: str, leaving: str
) -> OwnershipRecord:
    """The record with `target` added to the ensemble (its copy to be made) and
    `leaving` to leave once it is whole; RecordChangedError if that swap is not one
    to make now."""
    if not record.replicated:
        raise RecordChangedError("a topic of one copy has no member to swap")
    if record.leaving:
        raise RecordChangedError(f"member {record.leaving} is already leaving")
    if target in record.ensemble:
        raise RecordChangedError(f"broker {target} is in the ensemble already")
    if leaving not in record.ensemble or leaving == record.leader:
        raise RecordChangedError(f"broker {leaving} is not a member that may leave")
    return replace(
        record,
        ensemble=(*record.ensemble, target),
        data_dirs={**record.data_dirs, target: COPYING_PREFIX + target_data_dir},
        leaving=leaving,
    )


def _without(record: OwnershipRecord, member: str) -> OwnershipRecord:
    return replace(
        record,
        ensemble=tuple(m for m in record.ensemble if m != member),
        data_dirs={m: d for m, d in record.data_dirs.items() if m != member},
        leaving="",
    )


def next_step(
    record: OwnershipRecord,
    live: Callable[[str], bool],
    holds_its_copy: Callable[[str], bool],
) -> OwnershipRecord | None:
    """The record after the swap's next step, or None while there is none to take
    (no swap, the new copy not whole yet, or the leader itself leaving: it hands the
    topic over first). `live(member)`: registered now; `holds_its_copy(member)`: live
    on the data dir the record knows it by."""
    leaving = record.leaving
    if not leaving:
        return None
    joining = copying(record)
    gone = [m for m in joining if m != leaving and not live(m)]
    if gone:
        return _without(record, gone[0])  # abandoned: the ensemble as before
    if not live(leaving):
        return _without(record, leaving)
    # Another member gone (its copy, or the leader that made the swap): it leaves in
    # place of the live one, so every copy left is on a live broker.
    lost = [m for m in record.ensemble if m != leaving and m not in joining and not live(m)]
    if lost:
        return replace(record, leaving=lost[0])
    if leaving == record.leader:
        return None
    if all(holds_its_copy(m) for m in record.ensemble if m != leaving):
        return _without(record, leaving)
    return None


async def start_copy(
    ownership: TopicOwnership, name: TopicName, target: str, leaving: str
) -> OwnershipRecord:
    """Start making `target` a member of the topic in place of `leaving` (see the
    module docstring); RecordChangedError if the record does not allow it now."""
    info = ownership.live_broker(target)
    if info is None:
        raise RecordChangedError(f"broker {target} is not live")
    return await ownership.change_record(
        name, lambda record: with_copy_started(record, target, info.data_dir_id, leaving)
    )


async def take_next_step(
    ownership: TopicOwnership, name: TopicName, epoch: int
) -> OwnershipRecord | None:
    """Take the swap's next step as the topic's writer at `epoch` (RecordChangedError
    if it is not that any more): the new record, or None if there was none to take."""

    def step_of(record: OwnershipRecord) -> OwnershipRecord | None:
        return next_step(
            record,
            lambda member: ownership.live_broker(member) is not None,
            lambda member: ownership.holds_its_copy(record, member),
        )

    cached = await ownership.record(name)
    if cached is None or step_of(cached) is None:
        return None  # nothing to write (the record is read again to write it)

    def step(record: OwnershipRecord) -> OwnershipRecord:
        if record.leader != ownership.broker_id or record.epoch != epoch:
            raise RecordChangedError(
                f"topic {name} is led by broker {record.leader} at epoch {record.epoch}, "
                f"not by this one at epoch {epoch}"
            )
        new = step_of(record)
        if new is None:
            raise RecordChangedError(f"topic {name}: its ensemble swap changed meanwhile")
        return new

    return await ownership.change_record(name, step)
