"""The producer's batch container: messages collected into one entry."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from stableline._proto import broker_pb2 as pb


@dataclass(slots=True)
class Batch:
    """Messages of one transaction (or none) waiting to be sent as one entry."""

    txn: tuple[int, int] | None
    messages: list[pb.SingleMessage] = field(default_factory=list)
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
        message = pb.SingleMessage(payload=content, event_time_ms=event_time_ms)
        if properties:
            message.properties.update(properties)
        if partition_key is not None:
            message.partition_key = partition_key
            message.has_partition_key = True
        self.messages.append(message)
        self.futures.append(future)
        self.size_bytes += len(content)

    def __len__(self) -> int:
        return len(self.messages)

    def to_send(self, sequence_id: int, producer_name: str) -> pb.ProduceRequest:
        metadata = pb.EntryMetadata(
            num_messages=len(self.messages),
            publish_time_ms=int(time.time() * 1000),
            producer_name=producer_name,
            sequence_id=sequence_id,
        )
        if self.txn is not None:
            metadata.txn_id.most_bits, metadata.txn_id.least_bits = self.txn
        payload = pb.MessageBatch(messages=self.messages).SerializeToString()
        return pb.ProduceRequest(
            send=pb.ProducerSend(sequence_id=sequence_id, metadata=metadata, payload=payload)
        )
