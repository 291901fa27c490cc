"""Kafka requests answered from the broker's topics: one handler per broker.

The handler decodes a request's header, refuses an API or version it does not
serve (UNSUPPORTED_VERSION, as Kafka clients expect), lets the connection's
session (sasl.py) refuse what may not be sent before authentication and answer the
SASL requests, and hands every other request to the API group that answers it:
api_metadata (ApiVersions, Metadata), api_produce (Produce), api_fetch (Fetch,
ListOffsets), api_groups (consumer groups and their committed offsets), api_topics
(CreateTopics, DeleteTopics), api_txn (InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, TxnOffsetCommit). Requests of one connection are answered
in order, one at a time (listener.py).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from stableline.broker.kafka.coordinator.group_records import GroupRecords
from stableline.broker.kafka.coordinator.txn_coordinator import KafkaTransactionCoordinator
from stableline.broker.kafka.protocol import messages as m
from stableline.broker.kafka.protocol.codec import Reader, TooManyItems, Writer
from stableline.broker.kafka.server.api_base import KafkaApiBase, KafkaSettings
from stableline.broker.kafka.server.api_fetch import FetchApis
from stableline.broker.kafka.server.api_groups import GroupApis
from stableline.broker.kafka.server.api_metadata import MetadataApis
from stableline.broker.kafka.server.api_produce import ProduceApis
from stableline.broker.kafka.server.api_topics import TopicsApis
from stableline.broker.kafka.server.api_txn import TransactionApis
from stableline.broker.kafka.server.request_scope import CURRENT_REQUEST, RequestScope
from stableline.broker.kafka.server.sasl import SASL_APIS, KafkaSession
from stableline.broker.security.guard import Guard
from stableline.broker.topics.partitioned import PartitionedTopics
from stableline.broker.topics.registry import TopicRegistry
from stableline.broker.txn.coordinators import Coordinators

log = logging.getLogger(__name__)

__all__ = ["KafkaRequestHandler", "KafkaSettings"]


class KafkaRequestHandler(
    MetadataApis, ProduceApis, FetchApis, GroupApis, TopicsApis, TransactionApis
):
    """Decodes one request frame, runs it, encodes its response (None: no response)."""

    def __init__(
        self,
        registry: TopicRegistry,
        settings: KafkaSettings,
        coordinators: Coordinators | None = None,
        *,
        partitioned: PartitionedTopics | None = None,
        guard: Guard | None = None,
        kafka_txns: KafkaTransactionCoordinator | None = None,
        group_records: GroupRecords | None = None,
    ) -> None:
        super().__init__(
            registry,
            settings,
            coordinators,
            partitioned=partitioned,
            guard=guard,
            group_records=group_records,
        )
        self._kafka_txns = kafka_txns
        self._group_records = group_records
        self._handlers: dict[int, Callable[[Reader, m.RequestHeader], Awaitable[bytes | None]]] = {}
        for group in type(self).__mro__:
            if issubclass(group, KafkaApiBase):
                for api_key, method in vars(group).get("HANDLES", {}).items():
                    assert api_key not in self._handlers, f"two groups answer {api_key!r}"
                    self._handlers[api_key] = getattr(self, method)
        missing = set(m.SUPPORTED) - set(self._handlers) - SASL_APIS
        assert not missing, f"served but not answered: {missing}"
        self._guard_for_sessions = guard

    async def close(self) -> None:
        """Stop what runs in the background (the port is closed)."""
        if self._kafka_txns is not None:
            await self._kafka_txns.close()
        if self._group_records is not None:
            await self._group_records.close()

    def advertise_port(self, port: int) -> None:
        """The bound port (when the address asked for port 0), told in Metadata."""
        self._settings.advertised_port = port

    def new_session(self, peer: object = None) -> KafkaSession:
        """A new connection's session: unauthenticated when authentication is on."""
        return KafkaSession(self._guard_for_sessions, peer)

    async def _answer(self, reader: Reader, header: m.RequestHeader) -> bytes | None:
        """Run one request in a scope of its own: what it reads of the metadata
        store is read once, and what it is refused makes one log line."""
        scope = RequestScope(m.ApiKey(header.api_key).name, header.client_id)
        token = CURRENT_REQUEST.set(scope)
        try:
            return await self._handlers[header.api_key](reader, header)
        except TooManyItems as error:
            # Refused unread: the listener closes the connection with one line.
            raise TooManyItems(f"{scope.api}: {error} (kafka_max_partitions_per_request)") from None
        finally:
            CURRENT_REQUEST.reset(token)
            summary = scope.summary()
            if summary is not None:
                log.info("%s", summary)

    async def handle(self, frame: bytes, session: KafkaSession | None = None) -> bytes | None:
        """The response frame's body (header included); MalformedRequest when the
        request does not parse, ConnectionRefused when the session may not send it
        (the connection is closed unanswered). `session`: the connection's (a new
        one's when None)."""
        if session is None:
            session = self.new_session()
        reader = Reader(frame)
        header = m.read_request_header(reader)
        supported = m.SUPPORTED.get(header.api_key)  # type: ignore[call-overload]
        if supported is None or not supported[0] <= header.api_version <= supported[1]:
            if header.api_key == m.ApiKey.API_VERSIONS:
                # Clients expect a v0 body listing what is served, then ask again.
                body = m.write_api_versions(0, m.ErrorCode.UNSUPPORTED_VERSION)
                return Writer().int32(header.correlation_id).raw(body).getvalue()
            session.admit(header.api_key)  # unauthenticated: closed, unanswered
            log.info(
                "kafka: unsupported api key %d version %d from %s",
                header.api_key,
                header.api_version,
                header.client_id,
            )
            return m.response_header(header) + m.write_unsupported(header)
        session.admit(header.api_key)
        if header.api_key == m.ApiKey.SASL_HANDSHAKE:
            body = session.handshake(reader, header)
        elif header.api_key == m.ApiKey.SASL_AUTHENTICATE:
            body = session.authenticate(reader, header)
        else:
            body = await self._answer(reader, header)
        if body is None:
            return None
        return m.response_header(header) + body
