"""The Spark source's options, checked on the driver: every error names its option."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from stableline._types import IsolationLevel, parse_position, position_text, service_addresses
from stableline.spark._connection import Connection
from stableline.topic_name import InvalidTopicNameError, TopicName

DEFAULT_MAX_ENTRIES_PER_PARTITION = 50_000  # a ledger's worth by default
DEFAULT_MAX_BYTES_PER_PARTITION = 128 * 1024 * 1024  # spark.sql.files.maxPartitionBytes
EARLIEST = "earliest"
LATEST = "latest"


class OptionError(ValueError):
    """A stableline option is missing or malformed."""


def parse_connection(options: Mapping[str, str]) -> Connection:
    """`service` (host:port, or stableline+ssl://host:port for TLS; a cluster's brokers
    as host1:port,host2:port), `token` (a JWT sent with every call) and
    `tlsTrustCertsFile` (the broker's CA; turns TLS on)."""
    service = options.get("service")
    if not service:
        raise OptionError(
            "option 'service' is required: the broker's gRPC host:port "
            "(stableline+ssl://host:port for TLS; host1:port,host2:port for a cluster)"
        )
    try:
        seeds, tls = service_addresses(service)
    except ValueError as error:
        raise OptionError(f"option 'service': {error}") from None
    trust = options.get("tlsTrustCertsFile") or None
    if trust is not None and not Path(trust).is_file():
        raise OptionError(f"option 'tlsTrustCertsFile': no file {trust}")
    token = options.get("token")
    if token is not None and not token.strip():
        raise OptionError("option 'token' is empty")
    return Connection(
        seeds[0], tls or trust is not None, trust, token.strip() if token else None, seeds
    )


@dataclass(frozen=True, slots=True)
class SourceOptions:
    connection: Connection
    topics: tuple[str, ...]  # full names
    isolation: IsolationLevel
    # Per topic: "earliest", "latest" or a position "ledger:entry".
    starting: dict[str, str]
    ending: dict[str, str]
    # A partition reads at most this many entries (one ledger holds 50,000 by default)
    # and about this many bytes.
    max_entries_per_partition: int
    max_bytes_per_partition: int
    # Split a read into at least this many partitions (Kafka's source has the same
    # option); by default the planning machine's CPUs, the cores of a local session.
    min_partitions: int


def _topics(options: Mapping[str, str]) -> tuple[str, ...]:
    topic, topics = options.get("topic"), options.get("topics")
    if (topic is None) == (topics is None):
        raise OptionError("set exactly one of the options 'topic' (one name) or 'topics' (a,b)")
    names = [topic] if topic is not None else [t.strip() for t in topics.split(",") if t.strip()]
    option = "topic" if topic is not None else "topics"
    if not names:
        raise OptionError(f"option '{option}' names no topic")
    try:
        return tuple(dict.fromkeys(str(TopicName.parse(name)) for name in names))
    except InvalidTopicNameError as error:
        raise OptionError(f"option '{option}': {error}") from None


def _position_text(option: str, topic: str, value: object) -> str:
    if value in (EARLIEST, LATEST):
        return value
    if isinstance(value, str):
        try:
            return position_text(parse_position(value))
        except ValueError:
            pass
    raise OptionError(
        f"option '{option}': position {value!r} for {topic} is not "
        "'earliest', 'latest' or 'ledger:entry'"
    )


def _positions(options: Mapping[str, str], option: str, topics: tuple[str, ...], default: str):
    text = options.get(option, default).strip()
    if text in (EARLIEST, LATEST):
        return dict.fromkeys(topics, text)
    try:
        given = json.loads(text)
    except json.JSONDecodeError as error:
        raise OptionError(
            f"option '{option}' is neither 'earliest', 'latest' nor JSON like "
            f'{{"orders": "0:10"}}: {error}'
        ) from None
    if not isinstance(given, dict):
        raise OptionError(f"option '{option}' must be a JSON object of topic -> position")
    positions = dict.fromkeys(topics, default)
    for name, value in given.items():
        try:
            topic = str(TopicName.parse(name))
        except InvalidTopicNameError as error:
            raise OptionError(f"option '{option}': {error}") from None
        if topic not in positions:
            raise OptionError(f"option '{option}' names {topic}, which is not read")
        positions[topic] = _position_text(option, topic, value)
    return positions


def parse_options(options: Mapping[str, str], streaming: bool = False) -> SourceOptions:
    connection = parse_connection(options)
    topics = _topics(options)
    try:
        isolation = IsolationLevel.parse(options.get("isolationLevel", "read_committed"))
    except ValueError as error:
        raise OptionError(f"option 'isolationLevel': {error}") from None
    # Streams start at the end by default, as Kafka's do; batches read everything.
    starting = _positions(options, "startingPositions", topics, LATEST if streaming else EARLIEST)
    ending = _positions(options, "endingPositions", topics, LATEST)
    if any(value == EARLIEST for value in ending.values()):
        raise OptionError("option 'endingPositions' cannot be 'earliest'")
    limits = [
        _whole_number(options, option, default)
        for option, default in (
            ("maxEntriesPerPartition", DEFAULT_MAX_ENTRIES_PER_PARTITION),
            ("maxBytesPerPartition", DEFAULT_MAX_BYTES_PER_PARTITION),
            ("minPartitions", os.cpu_count() or 1),
        )
    ]
    return SourceOptions(connection, topics, isolation, starting, ending, *limits)


def _whole_number(options: Mapping[str, str], option: str, default: int) -> int:
    text = str(options.get(option, default))
    if not text.isdigit() or int(text) < 1:
        raise OptionError(f"option '{option}' must be a whole number >= 1, not {text!r}")
    return int(text)
