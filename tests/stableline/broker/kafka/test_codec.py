"""The item budget of one request: an array's length is taken from it before any
item is read, so a request naming more than its bound costs one length."""

from __future__ import annotations

import pytest

from stableline.broker.kafka.protocol import messages as m
from stableline.broker.kafka.protocol.codec import ItemBudget, Reader, TooManyItems, Writer
from tests.stableline.broker.kafka.raw_requests import fetch_body


def _fetch(topics: list[tuple[str, range]]) -> Reader:
    reader = Reader(fetch_body(topics, 1 << 20, 1 << 20))
    m.read_request_header(reader)
    return reader


def test_arrays_of_one_request_share_the_budget():
    budget = ItemBudget(5, "partitions")
    reader = Reader(
        Writer().array([1, 2, 3], Writer.int32).array([4, 5, 6], Writer.int32).getvalue()
    )
    assert reader.array(Reader.int32, budget=budget) == [1, 2, 3]
    with pytest.raises(TooManyItems, match="more than 5 partitions"):
        reader.array(Reader.int32, budget=budget)


def test_a_fetch_within_the_bound_reads_and_one_past_it_is_refused_unread():
    request = m.read_fetch(_fetch([("a", range(600)), ("b", range(400))]), 4, max_partitions=1000)
    assert sum(len(topic.partitions) for topic in request.topics) == 1000
    reader = _fetch([("a", range(600)), ("b", range(401))])
    with pytest.raises(TooManyItems):
        m.read_fetch(reader, 4, max_partitions=1000)
    # Stopped at b's length: its partitions were never read.
    assert reader.remaining == 401 * 16


def test_without_a_bound_a_request_reads_whole():
    request = m.read_fetch(_fetch([("a", range(5000))]), 4)
    assert len(request.topics[0].partitions) == 5000
