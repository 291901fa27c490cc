"""choose_ensemble and the ownership record: E distinct live brokers, the leader first
and the least loaded after it; records written before quorums were kept still read."""

from __future__ import annotations

import json

import pytest

from stableline.broker.cluster.ensemble import choose_ensemble
from stableline.broker.cluster.ownership import OwnershipRecord
from stableline.broker.topics.persistence import PersistencePolicy

LIVE = ["h:3", "h:1", "h:4", "h:2"]


def test_the_leader_is_the_least_loaded_then_the_next_least_loaded_follow_ties_by_id():
    led = {"h:1": 5, "h:2": 1, "h:3": 1, "h:4": 0}
    assert choose_ensemble(LIVE, led, 3) == ("h:4", "h:2", "h:3")
    assert choose_ensemble(LIVE, {}, 1) == ("h:1",)
    assert choose_ensemble(LIVE, {}, 4) == ("h:1", "h:2", "h:3", "h:4")


def test_a_given_leader_comes_first_and_counts_as_live():
    assert choose_ensemble(["h:2", "h:3"], {"h:3": 1}, 3, leader="h:9") == ("h:9", "h:2", "h:3")
    assert choose_ensemble(LIVE, {}, 2, leader="h:3") == ("h:3", "h:1")


def test_fewer_live_brokers_than_the_ensemble_is_no_ensemble():
    assert choose_ensemble(LIVE, {}, 5) is None
    assert choose_ensemble([], {}, 1) is None
    assert choose_ensemble(["h:1"], {}, 2, leader="h:1") is None


def test_a_record_keeps_its_quorums_and_an_old_record_reads_as_one_copy():
    record = OwnershipRecord("h:1", 0, ("h:1", "h:2", "h:3"), 7, 3, 2)
    assert OwnershipRecord.from_json(record.to_json()) == record
    assert record.persistence == PersistencePolicy(3, 3, 2)
    old = json.dumps({"leader": "h:1", "epoch": 2, "ensemble": ["h:1"], "since_ms": 7})
    assert OwnershipRecord.from_json(old.encode()) == OwnershipRecord("h:1", 2, ("h:1",), 7, 1, 1)


@pytest.mark.parametrize(
    "fields",
    [
        ("h:1", 0, ("h:1", "h:1"), 0, 1, 1),  # a broker twice
        ("h:1", 0, ("h:1", "h:2"), 0, 3, 2),  # Qw > E
        ("h:1", 0, ("h:1", "h:2"), 0, 1, 2),  # Qa > Qw
    ],
)
def test_a_record_breaking_the_ensemble_rules_is_never_made(fields):
    with pytest.raises(AssertionError):
        OwnershipRecord(*fields)


def test_reported_traffic_steers_placement_away_from_a_busy_broker_with_few_topics():
    live = ["h:1", "h:2", "h:3"]
    led = {"h:1": 1, "h:2": 4, "h:3": 4}
    # h:1 leads the fewest, but carries all the traffic: it is the busiest.
    traffic = {"h:1": 9000.0, "h:2": 0.0, "h:3": 0.0}
    assert choose_ensemble(live, led, 1, traffic=traffic) == ("h:2",)
    assert choose_ensemble(live, led, 3, traffic=traffic) == ("h:2", "h:3", "h:1")


def test_a_little_traffic_in_a_nearly_idle_cluster_does_not_keep_topics_off_a_broker():
    live = ["h:1", "h:2", "h:3"]
    led = {"h:1": 2, "h:2": 2, "h:3": 2}
    # A few messages a second, all on h:1: it loses ties, no more.
    traffic = {"h:1": 30.0, "h:2": 0.0, "h:3": 0.0}
    placed = []
    for _ in range(3):
        leader = choose_ensemble(live, led, 1, traffic=traffic)[0]
        placed.append(leader)
        led[leader] += 1
    assert placed == ["h:2", "h:3", "h:1"]


def test_a_broker_that_just_joined_takes_new_placements_until_it_leads_its_share():
    live = ["h:1", "h:2", "h:3", "h:4"]
    led = {"h:1": 6, "h:2": 6, "h:3": 6}
    traffic = {"h:1": 3000.0, "h:2": 3000.0, "h:3": 3000.0}
    placed = []
    for _ in range(4):
        leader = choose_ensemble(live, led, 1, traffic=traffic)[0]
        placed.append(leader)
        led[leader] = led.get(leader, 0) + 1  # the record counts at once
    assert placed == ["h:4"] * 4


def test_topics_placed_since_the_last_report_spread_placements():
    # No report shows traffic yet: each placement counts at once, so ten new topics
    # spread evenly instead of all going to the broker the reports make look idlest.
    live = ["h:1", "h:2"]
    led: dict[str, int] = {}
    traffic = {"h:1": 0.0, "h:2": 0.0}
    for _ in range(10):
        leader = choose_ensemble(live, led, 1, traffic=traffic)[0]
        led[leader] = led.get(leader, 0) + 1
    assert led == {"h:1": 5, "h:2": 5}
