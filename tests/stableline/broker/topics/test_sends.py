"""topics/sends.py: what a producer may append, the same on every face."""

from __future__ import annotations

import pytest

from managed_ledger import EntryHeader, EntryTooLargeError, EntryType
from stableline.broker.errors import code_of
from stableline.broker.topics.sends import InvalidSendError, check_entry, check_size


def test_a_batch_of_the_limit_is_accepted_and_one_byte_more_is_too_large():
    check_size(1024, 1024)
    with pytest.raises(
        EntryTooLargeError, match="batch of 1025 bytes exceeds max_message_size 1024"
    ):
        check_size(1025, 1024)


def test_a_data_entry_counting_its_payloads_messages_is_accepted():
    check_entry(EntryHeader(num_messages=3), counted=3)


@pytest.mark.parametrize("marker", [EntryType.TXN_COMMIT, EntryType.TXN_ABORT])
def test_a_producer_may_not_send_a_marker(marker):
    with pytest.raises(InvalidSendError, match="markers are written by transaction ends"):
        check_entry(EntryHeader(type=marker, num_messages=1), counted=1)


def test_an_entry_of_no_messages_is_refused():
    with pytest.raises(InvalidSendError, match="num_messages must be >= 1, got 0"):
        check_entry(EntryHeader(num_messages=0), counted=0)


def test_a_claimed_count_other_than_the_batchs_own_is_refused():
    with pytest.raises(InvalidSendError, match="is a MessageBatch of 2 message"):
        check_entry(EntryHeader(num_messages=5), counted=2)


def test_a_count_for_a_payload_that_is_not_a_batch_is_refused():
    with pytest.raises(InvalidSendError, match="is not a MessageBatch"):
        check_entry(EntryHeader(num_messages=1), counted=None)


def test_a_refused_send_is_invalid_input_on_every_face():
    assert issubclass(InvalidSendError, ValueError)
    assert code_of(InvalidSendError("bad")) == "InvalidArgument"
