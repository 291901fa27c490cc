"""The producer's batch container: messages collected into one entry."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from stableline._proto import broker_pb2 as pb

_SMALL_VARINTS = [bytes((value,)) for value in range(0x80)]


def _varint(value: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative int."""
    if value < 0x80:
        return _SMALL_VARINTS[value]
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@dataclass(slots=True)
class Batch:
    """Messages of one transaction (or none) waiting to be sent as one entry."""

    txn: tuple[int, int] | None
    # Each message already encoded as a MessageBatch `messages` field (tag, length,
    # SingleMessage): the batch payload is their concatenation, byte for byte what
    # protobuf would write, without a protobuf object per message.
    encoded: list[bytes] = field(default_factory=list)
    futures: list[asyncio.Future] = field(default_factory=list)
    size_bytes: int = 0

    def add(
        self,
        content: bytes,
        properties: dict[str, str] | None,
        partition_key: str | None,
        event_time_ms: int,
        future: asyncio.Future,
    ) -> None:
        if (
            properties
            or partition_key is not None
            or event_time_ms
            or type(event_time_ms) is not int
        ):
            message = pb.SingleMessage(payload=content, event_time_ms=event_time_ms)
            if properties:
                message.properties.update(properties)
            if partition_key is not None:
                message.partition_key = partition_key
                message.has_partition_key = True
            body = message.SerializeToString()
        else:
            # SingleMessage{payload = 1}, the only field set (proto3 leaves out zeros).
            body = b"\x0a" + _varint(len(content)) + content if content else b""
        self.encoded.append(b"\x0a" + _varint(len(body)) + body)
        self.futures.append(future)
        self.size_bytes += len(content)

    def __len__(self) -> int:
        return len(self.encoded)

    def to_send(self, sequence_id: int, producer_name: str) -> pb.ProduceRequest:
        metadata = pb.EntryMetadata(
            num_messages=len(self.encoded),
            publish_time_ms=int(time.time() * 1000),
            producer_name=producer_name,
            sequence_id=sequence_id,
        )
        if self.txn is not None:
            metadata.txn_id.most_bits, metadata.txn_id.least_bits = self.txn
        payload = b"".join(self.encoded)
        return pb.ProduceRequest(
            send=pb.ProducerSend(sequence_id=sequence_id, metadata=metadata, payload=payload)
        )
