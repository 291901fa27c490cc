"""The inflation budget of one request: batches draw on it in turn, each inflated
no further than what is left, and each record charged for its objects."""

from __future__ import annotations

import pytest

from stableline.broker.kafka.protocol.compression import (
    RECORD_COST_BYTES,
    InflationBudget,
    RecordsTooLarge,
)
from stableline.broker.kafka.protocol.records import decode_batches
from tests.stableline.broker.kafka.conftest import record_batch

MIB = 1024 * 1024


def test_batches_within_the_budget_draw_on_it():
    budget = InflationBudget(4 * MIB)
    batch = record_batch(bytes(MIB), compression=1)
    assert len(decode_batches(batch * 3, budget=budget)) == 3
    assert budget.left < MIB and not budget.exhausted


def test_the_batch_that_passes_the_budget_refuses_the_request_and_spends_it():
    budget = InflationBudget(4 * MIB)
    batch = record_batch(bytes(MIB), compression=4)
    with pytest.raises(RecordsTooLarge, match="kafka_max_produce_inflated_bytes"):
        decode_batches(batch * 5, budget=budget)
    assert budget.exhausted and budget.left == 0
    with pytest.raises(RecordsTooLarge):
        decode_batches(record_batch(b"small"), budget=budget)


def test_records_are_charged_for_their_objects_before_they_are_inflated():
    count = 1000
    budget = InflationBudget(count * RECORD_COST_BYTES)
    with pytest.raises(RecordsTooLarge):
        decode_batches(record_batch(*[b""] * count, compression=1), budget=budget)
    budget = InflationBudget(count * RECORD_COST_BYTES + 64 * 1024)
    decode_batches(record_batch(*[b""] * count, compression=1), budget=budget)
