"""An ensemble swap's steps on the record (cluster/ensemble_swaps.py): the ensemble
grows by the new member first and shrinks by the leaving one only once every other
member holds its copy; a copy whose target is gone is abandoned; one swap at a time,
never of the leader, never of a topic of one copy."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stableline.broker.cluster.ensemble_swaps import copying, next_step, with_copy_started
from stableline.broker.cluster.ownership import (
    COPYING_PREFIX,
    OwnershipRecord,
    RecordChangedError,
    TopicOwnership,
)
from stableline.metadata import BrokerInfo

ABC = ("a", "b", "c")


def three_copies() -> OwnershipRecord:
    return OwnershipRecord("a", 4, ABC, 0, 3, 2, data_dirs={"a": "da", "b": "db", "c": "dc"})


def started() -> OwnershipRecord:
    return with_copy_started(three_copies(), "d", "dd", "c")


def test_a_copy_started_grows_the_ensemble_and_keeps_every_whole_copy():
    record = started()
    assert record.ensemble == ("a", "b", "c", "d")
    assert record.leaving == "c"
    assert record.data_dirs["d"] == COPYING_PREFIX + "dd"
    assert record.data_dirs["c"] == "dc"  # still counted on until the new copy is whole
    assert copying(record) == ["d"]
    assert (record.leader, record.epoch, record.write_quorum) == ("a", 4, 3)
    assert OwnershipRecord.from_json(record.to_json()) == record


def test_a_record_with_nobody_leaving_reads_and_writes_as_before():
    record = three_copies()
    assert b"leaving" not in record.to_json()
    assert OwnershipRecord.from_json(record.to_json()).leaving == ""


@pytest.mark.parametrize(
    ("record", "target", "leaving"),
    [
        (started(), "e", "b"),  # one swap at a time
        (three_copies(), "b", "c"),  # already a member
        (three_copies(), "d", "a"),  # the leader leaves by a transfer, not a swap
        (three_copies(), "d", "x"),  # not a member
        (OwnershipRecord("a", 1, ("a",), 0), "d", "a"),  # one copy
    ],
)
def test_swaps_not_to_make_are_refused(record, target, leaving):
    with pytest.raises(RecordChangedError):
        with_copy_started(record, target, "dd", leaving)


def everyone_live(member: str) -> bool:
    return True


def test_the_leaving_member_leaves_only_once_the_new_copy_is_whole():
    record = started()

    def holds(member: str) -> bool:
        return not record.data_dirs[member].startswith(COPYING_PREFIX)

    assert next_step(record, everyone_live, holds) is None  # d's copy is being made
    whole = replace(record, data_dirs={**record.data_dirs, "d": "dd"})
    after = next_step(whole, everyone_live, lambda member: True)
    assert after is not None
    assert after.ensemble == ("a", "b", "d")
    assert after.leaving == ""
    assert "c" not in after.data_dirs and after.data_dirs["d"] == "dd"
    assert next_step(after, everyone_live, lambda member: True) is None


def test_a_copy_whose_target_is_gone_is_abandoned_and_the_ensemble_is_as_before():
    record = started()
    after = next_step(record, lambda member: member != "d", lambda member: member != "d")
    assert after == three_copies()


def test_a_leaving_member_gone_meanwhile_leaves_at_once():
    record = started()
    after = next_step(record, lambda member: member != "c", lambda member: member == "a")
    assert after is not None
    assert after.ensemble == ("a", "b", "d") and after.leaving == ""
    assert copying(after) == ["d"]  # still being made, as a replaced member's


def test_another_member_gone_leaves_in_place_of_the_live_leaving_one():
    record = started()
    after = next_step(record, lambda member: member != "b", lambda member: member != "b")
    assert after is not None and after.leaving == "b" and after.ensemble == record.ensemble
    after = next_step(after, lambda member: member != "b", lambda member: member != "b")
    assert after is not None and after.ensemble == ("a", "c", "d") and after.leaving == ""
    assert copying(after) == ["d"]


def test_a_leader_that_is_to_leave_hands_the_topic_over_first():
    record = started()
    taken = replace(record, leader="c", epoch=5)
    assert next_step(taken, everyone_live, lambda member: True) is None
    # Its old leader gone (why c took it): that one leaves instead.
    after = next_step(taken, lambda member: member != "a", lambda member: member != "a")
    assert after is not None and after.leaving == "a" and after.ensemble == record.ensemble
    after = next_step(after, lambda member: member != "a", lambda member: member != "a")
    assert after is not None and after.ensemble == ("b", "c", "d") and after.leaving == ""


def _info(broker_id: str, data_dir_id: str) -> BrokerInfo:
    address = f"{broker_id}.test:1"  # a registration's id is its HOST:PORT
    url = f"http://{broker_id}.test:2"
    return BrokerInfo(address, address, url, "", 0, "", 0, "run", data_dir_id=data_dir_id)


def test_a_new_member_on_the_data_dir_it_was_chosen_with_counts_for_a_fence():
    """Mid-swap the ensemble is one larger: a failover must still find E - Qa + 1
    fenced answers, so the new member's (its partial copy is all it can have
    acknowledged) counts; one back on another data dir does not."""
    ownership = TopicOwnership(store=None, cluster="c")  # no store: nothing is read
    record = started()
    ownership._live = {
        "b": _info("b", "db"),
        "c": _info("c", "dc"),
        "d": _info("d", "dd"),
    }
    assert not ownership.holds_its_copy(record, "d")
    assert ownership.answers_for_its_copy(record, "d")
    assert ownership.answers_for_its_copy(record, "b")
    ownership._live["d"] = _info("d", "another")
    assert not ownership.answers_for_its_copy(record, "d")
    ownership._live["c"] = _info("c", "another")
    assert not ownership.answers_for_its_copy(record, "c")
    del ownership._live["b"]
    assert not ownership.answers_for_its_copy(record, "b")
