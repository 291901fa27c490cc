"""ApiVersions and Metadata: what this broker serves, and where each topic lives."""

from __future__ import annotations

import logging

from stableline.broker.registry import TooManyTopicsError
from stableline.kafka import messages as m
from stableline.kafka.api_base import KAFKA_TOPIC, KafkaApiBase
from stableline.kafka.codec import Reader

log = logging.getLogger(__name__)


class MetadataApis(KafkaApiBase):
    HANDLES = {m.ApiKey.API_VERSIONS: "_api_versions", m.ApiKey.METADATA: "_metadata"}

    # ------------------------------------------------------------ ApiVersions

    async def _api_versions(self, reader: Reader, header: m.RequestHeader) -> bytes:
        m.read_api_versions(reader, header.api_version)
        return m.write_api_versions(header.api_version)

    # ------------------------------------------------------------ Metadata

    async def _metadata(self, reader: Reader, header: m.RequestHeader) -> bytes:
        request = m.read_metadata(reader, header.api_version)
        prefix = f"persistent://{self._settings.namespace}/"
        topics: list[m.TopicMetadata] = []
        if request.topics is None:
            for full in self._registry.names(self._settings.namespace):
                short = full[len(prefix) :]
                if KAFKA_TOPIC.fullmatch(short):
                    topics.append(m.TopicMetadata(short, m.ErrorCode.NONE, [0], 0))
        else:
            for short in request.topics:
                topics.append(await self._topic_metadata(short, request.allow_auto_topic_creation))
        broker = self._this_node()
        return m.write_metadata(header.api_version, [broker], broker.node_id, topics)

    async def _topic_metadata(self, short: str, auto_create: bool) -> m.TopicMetadata:
        name = self._topic_name(short)
        if name is None:
            return m.TopicMetadata(short, m.ErrorCode.INVALID_TOPIC_EXCEPTION, [], 0)
        if not self._registry.exists(name):
            if not (auto_create and self._settings.allow_auto_topic_creation):
                return m.TopicMetadata(short, m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [], 0)
            try:
                await self._registry.create(name)
            except TooManyTopicsError as error:
                log.warning("kafka: cannot create %s: %s", name, error)
                return m.TopicMetadata(short, m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [], 0)
        return m.TopicMetadata(short, m.ErrorCode.NONE, [0], 0)
