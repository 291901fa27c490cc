"""What a producer may append to a topic, whichever face it came through.

The gRPC face (grpc/produce_session.py) and the Kafka face
(kafka/server/api_produce.py) both check a send here before Topic.publish, so a
batch refused on one face is refused on the other for the same reason, with the
same words. What Topic.publish itself checks is the write gate (topics/write_gate.py:
BrokerFencedError, nothing written) and, for a transactional batch, its
transaction (txnbuffer's TransactionEndedError).

Rules:
- A batch is at most `max_message_size` bytes as sent (EntryTooLargeError).
- A producer appends data entries only: markers are written by transaction ends.
- A batch holds at least one message, and the count its header claims is the
  payload's own: consumers' permits count messages, so a wrong count could let one
  entry drain a subscription's permits (InvalidSendError).
"""

from __future__ import annotations

from managed_ledger import EntryHeader, EntryTooLargeError, EntryType
from stableline.broker.errors import BrokerError


class InvalidSendError(BrokerError, ValueError):
    """A send whose header contradicts its payload, or that no producer may make;
    nothing is written."""

    code = "InvalidArgument"


def check_size(size: int, max_message_size: int) -> None:
    """EntryTooLargeError when a batch of `size` bytes exceeds the broker's limit."""
    if size > max_message_size:
        raise EntryTooLargeError(
            f"batch of {size} bytes exceeds max_message_size {max_message_size}"
        )


def check_entry(header: EntryHeader, counted: int | None) -> None:
    """InvalidSendError unless `header` is a producer's data entry of at least one
    message whose count is `counted`, the payload's own (None: not a batch)."""
    if header.type != EntryType.DATA:
        raise InvalidSendError(
            f"a producer sends data entries, not {header.type.name}: markers are "
            "written by transaction ends"
        )
    if header.num_messages <= 0:
        raise InvalidSendError(f"num_messages must be >= 1, got {header.num_messages}")
    if counted != header.num_messages:
        raise InvalidSendError(
            f"num_messages is {header.num_messages} but the payload "
            + (
                "is not a MessageBatch"
                if counted is None
                else f"is a MessageBatch of {counted} message(s)"
            )
            + "; num_messages must count the batch's messages"
        )
