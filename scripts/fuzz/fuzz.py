"""Fuzz a real broker over gRPC: every request message of broker.proto and admin.proto.

Hypothesis builds requests from the protobuf descriptors (random and boundary
integers, unknown enum values, empty and huge strings and payloads, random oneof
choices), mixed with ids the broker knows (topics, subscriptions, message ids of
other topics and subscriptions, open and ended transactions), and sends them to
a broker process on 127.0.0.1: unary calls, and Produce/Subscribe streams whose
messages come in any order (a send before the open, an ack before the
subscribe, acks of other subscriptions' messages).

Every answer must be a proper gRPC status with a message a person can act on:
never UNKNOWN or INTERNAL, never a deadline exceeded except by a long-poll Fetch,
never a traceback; in-stream errors (SendError, RequestDone) likewise. The
broker must stay up (health checked every batch), and afterwards a normal
workload (produce N, consume N at READ_COMMITTED, a committed transaction) must
see all its data, as must a topic written before the fuzzing began. A table of
status codes per RPC at the end; exit status 1 on any violation, with the
smallest failing request hypothesis finds.

With --secure the broker serves TLS, tokens and authorization (`serve --secure`,
with a small max_connections and connection_idle_timeout_s): the requests above go
with a superuser token, and the run then holds idle streams that carry no token or
a bad one (garbage, another key's, expired), silent or with a proper opening. Each
must be refused (UNAUTHENTICATED) or ended as idle (DEADLINE_EXCEEDED) with a
message, none may take a connection slot: while they are held, max_connections
authenticated producers all open (and one more is refused as over the limit), and
the broker stays up.

    python scripts/fuzz/fuzz.py [--requests 10000] [--seed S] [--json PATH] [--secure]
        [--target HOST:PORT [--token T --tls-trust-certs-file CA.pem]]
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import jwt
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

import stableline
from stableline import AuthenticationToken, InitialPosition, IsolationLevel, MessageId
from stableline._proto import admin_pb2, broker_pb2, broker_pb2_grpc
from stableline._types import parse_service_url
from stableline.broker.security.tokens import create_secret_key, create_token
from stableline.testing import BrokerProcess, temporary_broker
from stableline.wire import plain_prefix

SERVICES = (
    broker_pb2.DESCRIPTOR.services_by_name["Broker"],
    admin_pb2.DESCRIPTOR.services_by_name["Admin"],
)
CALL_TIMEOUT_S = 5.0
# A Fetch may wait up to max_wait_ms for data (the broker caps it at 30 s): past
# this deadline the client gives up, which is the long poll working, not a hang.
FETCH_TIMEOUT_S = 1.5
HEALTH_EVERY = 250
PROGRESS_EVERY = 1000
MAX_MESSAGE_SIZE = 5 * 1024 * 1024
HUGE_TEXT = 70_000
FORBIDDEN = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
WORKLOAD_MESSAGES = 200
SENTINEL_TOPIC = "fuzz-sentinel"  # written before, never named by a fuzzed request
SENTINEL_MESSAGES = 50
# The secure run's broker: few slots and a short idle timeout, so the idle-stream
# check fills them and sees the streams ended within seconds.
SECURE_MAX_CONNECTIONS = 4
SECURE_IDLE_TIMEOUT_S = 1.5
IDLE_STREAMS_PER_SHAPE = 3
# An idle stream must be ended within this (the broker sweeps idle streams).
IDLE_END_WITHIN_S = SECURE_IDLE_TIMEOUT_S * 4 + 5
_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
]

INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}


class Violation(AssertionError):
    """The broker answered in a way it promised never to."""


@dataclass(frozen=True)
class Target:
    """The broker fuzzed and how to reach it: plaintext, or TLS with a superuser token."""

    service_url: str
    http_url: str | None
    ca_file: Path | None = None
    token: str | None = None

    @property
    def address(self) -> str:
        return parse_service_url(self.service_url)[0]

    @property
    def secure(self) -> bool:
        return self.token is not None

    def client(self) -> stableline.Client:
        if not self.secure:
            return stableline.Client(self.service_url)
        return stableline.Client(
            self.service_url,
            authentication=AuthenticationToken(self.token),
            tls_trust_certs_file_path=self.ca_file,
        )

    def channel(self, token: str | None = None, own_connection: bool = False) -> grpc.Channel:
        """A raw channel; on a secure broker with `token` (None: the superuser's, "":
        none) on every call. own_connection: not shared with another channel."""
        options = list(_CHANNEL_OPTIONS)
        if own_connection:
            options.append(("grpc.use_local_subchannel_pool", 1))
        if not self.secure:
            return grpc.insecure_channel(self.address, options=options)
        credentials = grpc.ssl_channel_credentials(Path(self.ca_file).read_bytes())
        token = self.token if token is None else token
        if token:
            credentials = grpc.composite_channel_credentials(
                credentials, grpc.access_token_call_credentials(token)
            )
        return grpc.secure_channel(self.address, credentials, options=options)

    def http_context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=str(self.ca_file)) if self.secure else None


# ---------------------------------------------------------------- what the broker knows


@dataclass
class Pools:
    """Names and ids the broker knows, so fuzzed requests reach past the first check."""

    topics: list[str]
    subscriptions: list[str]
    message_ids: list[tuple[int, int, int]]  # (ledger, entry, batch index), any topic
    txn_ids: list[tuple[int, int]]  # open, committed and aborted


FUZZ_TOPICS = ["fuzz-a", "persistent://public/default/fuzz-b", "other/ns/fuzz-c"]
FUZZ_SUBSCRIPTIONS = ["fuzz-sub", "other-sub", "rc-sub", "ru-sub"]


def seed_workload(target: Target) -> Pools:
    """Data on the fuzzed topics, subscriptions with backlog, and transactions."""
    message_ids: list[tuple[int, int, int]] = []
    txn_ids: list[tuple[int, int]] = []
    with target.client() as client:
        for topic in FUZZ_TOPICS:
            producer = client.create_producer(topic)
            for index in range(5):
                sent = producer.send(f"{topic}-{index}".encode())
                message_ids.append((sent.ledger_id, sent.entry_id, sent.batch_index))
            for subscription, level in (
                ("rc-sub", IsolationLevel.READ_COMMITTED),
                ("ru-sub", IsolationLevel.READ_UNCOMMITTED),
            ):
                consumer = client.subscribe(
                    topic,
                    subscription,
                    initial_position=InitialPosition.Earliest,
                    isolation_level=level,
                )
                consumer.close()
            for end in ("open", "commit", "abort"):
                txn = client.new_transaction(timeout_ms=600_000)
                sent = producer.send(f"{topic}-{end}".encode(), txn=txn)
                message_ids.append((sent.ledger_id, sent.entry_id, sent.batch_index))
                txn_ids.append(txn.id)
                if end == "commit":
                    txn.commit()
                elif end == "abort":
                    txn.abort()
            producer.close()
    return Pools(list(FUZZ_TOPICS), list(FUZZ_SUBSCRIPTIONS), message_ids, txn_ids)


# ---------------------------------------------------------------- strategies


def mostly(common: st.SearchStrategy, rare: st.SearchStrategy, one_in: int = 4):
    """`rare` one time in `one_in`: requests mostly well formed reach deeper states."""
    return st.integers(0, one_in - 1).flatmap(lambda n: rare if n == 0 else common)


def boundary_ints(low: int, high: int) -> st.SearchStrategy[int]:
    edges = sorted({v for v in (low, low + 1, -1, 0, 1, 2, 2**31 - 1, 2**62, high - 1, high)})
    return st.one_of(
        st.sampled_from([v for v in edges if low <= v <= high]),
        st.integers(max(low, -2), min(high, 50)),
        st.integers(low, high),
    )


def texts() -> st.SearchStrategy[str]:
    return st.one_of(
        st.just(""),
        st.text(max_size=40),
        st.text(alphabet="abc/:-_.", max_size=30),
        st.sampled_from(["persistent://", "persistent://a/b/c/d", "non-persistent://a/b/c", "/"]),
        st.integers(1, 4).map(lambda n: "x" * (HUGE_TEXT * n // 4)),
        # Names just past and well past the name rules' limits.
        st.sampled_from([255, 256, 257, 600]).map(lambda n: "n" * n),
    )


def payloads() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.just(b""),
        st.binary(max_size=64),
        stableline_batches(),
        st.sampled_from([MAX_MESSAGE_SIZE, MAX_MESSAGE_SIZE + 1, 1024 * 1024]).map(
            lambda n: b"\x00" * n
        ),
        huge_batches(),
    )


def huge_batches() -> st.SearchStrategy[bytes]:
    """Batches whose message count or size is extreme: up to max_message_size of
    empty messages (millions of them), or one message of nearly that size."""
    empty_message = plain_prefix(0)
    return st.one_of(
        st.sampled_from([1, 1000, MAX_MESSAGE_SIZE // len(empty_message)]).map(
            lambda n: empty_message * n
        ),
        st.just(plain_prefix(MAX_MESSAGE_SIZE - 16) + b"\x01" * (MAX_MESSAGE_SIZE - 16)),
    )


def stableline_batches() -> st.SearchStrategy[bytes]:
    """A well-formed MessageBatch, as the client encodes it."""
    single = st.builds(
        broker_pb2.SingleMessage,
        payload=st.binary(max_size=32),
        partition_key=st.text(max_size=8),
        properties=st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
    )
    return st.lists(single, max_size=4).map(
        lambda messages: broker_pb2.MessageBatch(messages=messages).SerializeToString()
    )


@dataclass
class Strategies:
    """Descriptor-driven strategies, with the broker's known ids mixed in by field."""

    pools: Pools
    _cache: dict[str, st.SearchStrategy] = field(default_factory=dict)

    def scalar(self, message: Descriptor, fd: FieldDescriptor) -> st.SearchStrategy:
        name = fd.name
        pools = self.pools
        if fd.type == FieldDescriptor.TYPE_STRING:
            if name == "topic":
                return mostly(st.sampled_from(pools.topics), texts())
            if name in ("subscription", "consumer_name", "producer_name", "name"):
                return mostly(st.sampled_from(pools.subscriptions), texts())
            if name == "namespace":
                return st.one_of(st.sampled_from(["public/default", "other/ns", ""]), texts())
            return texts()
        if fd.type == FieldDescriptor.TYPE_BYTES:
            return payloads()
        if fd.type == FieldDescriptor.TYPE_BOOL:
            return st.booleans()
        if fd.type == FieldDescriptor.TYPE_ENUM:
            known = [value.number for value in fd.enum_type.values]
            return mostly(st.sampled_from(known), boundary_ints(-(2**31), 2**31 - 1))
        if fd.type in INT_RANGES:
            low, high = INT_RANGES[fd.type]
            if message.name == "TransactionRequest" and name in ("most_bits", "least_bits"):
                index = 0 if name == "most_bits" else 1
                known = sorted({txn[index] for txn in pools.txn_ids})
                return mostly(st.sampled_from(known), boundary_ints(low, high))
            if message.name == "EntryMetadata" and name == "num_messages":
                # Claimed counts: right for a small batch, or far off it.
                return st.one_of(st.integers(0, 4), st.sampled_from([2**31 - 1, 2**20, -1, 1000]))
            return mostly(st.integers(max(low, -1), 100), boundary_ints(low, high), one_in=3)
        if fd.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            return st.floats(allow_nan=True, allow_infinity=True, width=32)
        raise TypeError(f"no strategy for {message.name}.{name} (type {fd.type})")

    def message(self, descriptor: Descriptor) -> st.SearchStrategy:
        cached = self._cache.get(descriptor.full_name)
        if cached is not None:
            return cached
        generic = self._generic(descriptor)
        known = self._known_values(descriptor)
        strategy = mostly(known, generic, one_in=3) if known is not None else generic
        self._cache[descriptor.full_name] = strategy
        return strategy

    def _known_values(self, descriptor: Descriptor) -> st.SearchStrategy | None:
        pools = self.pools
        if descriptor.name == "TxnId":
            return st.sampled_from(pools.txn_ids).map(
                lambda txn: broker_pb2.TxnId(most_bits=txn[0], least_bits=txn[1])
            )
        if descriptor.name == "MessageIdData":
            # Real ids, of this topic or any other: acks for other subscriptions.
            return st.sampled_from(pools.message_ids).map(
                lambda m: broker_pb2.MessageIdData(ledger_id=m[0], entry_id=m[1], batch_index=m[2])
            )
        if descriptor.name == "Position":
            return st.sampled_from(pools.message_ids).map(
                lambda m: broker_pb2.Position(ledger_id=m[0], entry_id=m[1])
            )
        return None

    def _generic(self, descriptor: Descriptor) -> st.SearchStrategy:
        cls = message_factory.GetMessageClass(descriptor)
        plain = [fd for fd in descriptor.fields if fd.containing_oneof is None]
        oneofs = list(descriptor.oneofs)
        values = {fd.name: self._value(descriptor, fd) for fd in descriptor.fields}

        @st.composite
        def build(draw):
            instance = cls()
            for fd in plain:
                if draw(mostly(st.just(True), st.just(False), one_in=8)):
                    _set(instance, fd, draw(values[fd.name]))
            for oneof in oneofs:
                chosen = draw(mostly(st.sampled_from(list(oneof.fields)), st.none(), one_in=8))
                if chosen is not None:
                    _set(instance, chosen, draw(values[chosen.name]))
            return instance

        return build()

    def _value(self, message: Descriptor, fd: FieldDescriptor) -> st.SearchStrategy:
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            key = self.scalar(fd.message_type, fd.message_type.fields_by_name["key"])
            value = self.scalar(fd.message_type, fd.message_type.fields_by_name["value"])
            return st.dictionaries(key, value, max_size=3)
        if fd.message_type is not None:
            single = st.deferred(lambda: self.message(fd.message_type))
        else:
            single = self.scalar(message, fd)
        if fd.is_repeated:
            # Mostly short lists; one in twenty long.
            return st.integers(0, 19).flatmap(
                lambda n: (
                    st.lists(single, min_size=200, max_size=1000)
                    if n == 0
                    else st.lists(single, max_size=5)
                )
            )
        return single


def _set(instance, fd: FieldDescriptor, value) -> None:
    target = getattr(instance, fd.name) if fd.is_repeated else None
    if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
        target.update(value)
    elif fd.is_repeated:
        if fd.message_type is not None:
            for item in value:
                target.add().CopyFrom(item)
        else:
            target.extend(value)
    elif fd.message_type is not None:
        getattr(instance, fd.name).CopyFrom(value)
    else:
        setattr(instance, fd.name, value)


# ---------------------------------------------------------------- calls


@dataclass(frozen=True, slots=True)
class Call:
    """One RPC: a unary request, or the messages of a client stream in order."""

    method: MethodDescriptor
    requests: tuple
    raw: bool = False  # requests are bytes, maybe not a message at all

    @property
    def rpc(self) -> str:
        return f"{self.method.containing_service.name}.{self.method.name}"

    def __repr__(self) -> str:
        if self.raw:
            shown = [
                repr(r[:200]) + (f"... ({len(r)} bytes)" if len(r) > 200 else "")
                for r in self.requests
            ]
        else:
            shown = [f"{type(r).__name__}({_short(r)})" for r in self.requests]
        return f"{self.rpc}{'(raw)' if self.raw else ''}[{', '.join(shown)}]"


def _short(request) -> str:
    text = str(request).replace("\n", " ")
    return text if len(text) < 300 else text[:300] + f"... ({request.ByteSize()} bytes)"


def method_calls(method: MethodDescriptor, strategies: Strategies) -> st.SearchStrategy[Call]:
    """One RPC with fuzzed requests; a stream's requests in any order."""
    request = strategies.message(method.input_type)
    if method.client_streaming:
        opener = _stream_opener(method, strategies.pools)
        typed = st.tuples(
            mostly(opener.map(lambda r: (r,)), st.just(())),
            st.lists(request, max_size=6),
        ).map(lambda parts: Call(method, (*parts[0], *parts[1])))
    else:
        typed = request.map(lambda r: Call(method, (r,)))
    # The same requests as bytes, damaged: what a buggy or hostile client sends.
    raws = st.lists(mutated(request), min_size=1, max_size=3 if method.client_streaming else 1).map(
        lambda r: Call(method, tuple(r), raw=True)
    )
    return mostly(typed, raws, one_in=5)


def every_method() -> list[MethodDescriptor]:
    return [method for service in SERVICES for method in service.methods]


def calls(strategies: Strategies) -> st.SearchStrategy[Call]:
    """Any RPC of either service."""
    return st.one_of([method_calls(method, strategies) for method in every_method()])


MUTATIONS = ("truncate", "flip", "append", "random", "bad-utf8", "intact")


def mutated(request: st.SearchStrategy) -> st.SearchStrategy[bytes]:
    def apply(parts) -> bytes:
        message, how, where, noise = parts
        raw = message.SerializeToString()
        at = where % (len(raw) + 1)
        if how == "truncate":
            return raw[:at]
        if how == "flip" and raw:
            index = where % len(raw)
            return raw[:index] + bytes([raw[index] ^ noise[0]]) + raw[index + 1 :]
        if how == "append":
            return raw + noise
        if how == "random":
            return noise
        if how == "bad-utf8":  # field 1, length-delimited, not UTF-8
            return raw + b"\x0a\x02\xc3\x28"
        return raw

    return st.tuples(
        request,
        st.sampled_from(MUTATIONS),
        st.integers(0, 2**16),
        st.binary(min_size=1, max_size=16),
    ).map(apply)


def _stream_opener(method: MethodDescriptor, pools: Pools) -> st.SearchStrategy:
    """A valid first message, so what follows reaches the stream's later states."""
    topics = st.sampled_from(pools.topics)
    if method.name == "Produce":
        return topics.map(
            lambda t: broker_pb2.ProduceRequest(open=broker_pb2.ProducerOpen(topic=t))
        )
    return st.builds(
        lambda topic, subscription, kind, level, earliest: broker_pb2.SubscribeRequest(
            subscribe=broker_pb2.SubscribeOpen(
                topic=topic,
                subscription=subscription,
                type=kind,
                isolation_level=level,
                initial_position=earliest,
            )
        ),
        topics,
        st.sampled_from(pools.subscriptions),
        st.sampled_from([0, 1, 2, 3]),
        st.sampled_from([0, 1]),
        st.sampled_from([0, 1]),
    )


@dataclass
class Tally:
    """What came back: gRPC status codes per RPC, and in-stream error codes."""

    statuses: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    in_stream: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    # Why requests were refused: the first words of each status message, per RPC.
    reasons: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    requests: int = 0
    messages: int = 0


class Fuzzer:
    def __init__(self, channel: grpc.Channel, tally: Tally, broker_alive: Callable[[], bool]):
        self.channel = channel
        self.tally = tally
        self.broker_alive = broker_alive
        self._stubs: dict[str, Callable] = {}

    def _stub(self, method: MethodDescriptor, raw: bool) -> Callable:
        path = f"/{method.containing_service.full_name}/{method.name}"
        stub = self._stubs.get(f"{path} {raw}")
        if stub is None:
            output = message_factory.GetMessageClass(method.output_type)
            make = {
                (False, False): self.channel.unary_unary,
                (True, True): self.channel.stream_stream,
                (False, True): self.channel.unary_stream,
                (True, False): self.channel.stream_unary,
            }[(method.client_streaming, method.server_streaming)]
            stub = make(
                path,
                request_serializer=(lambda m: m) if raw else (lambda m: m.SerializeToString()),
                response_deserializer=output.FromString,
            )
            self._stubs[f"{path} {raw}"] = stub
        return stub

    def run(self, call: Call) -> None:
        method, tally = call.method, self.tally
        tally.requests += 1
        tally.messages += len(call.requests)
        timeout = FETCH_TIMEOUT_S if method.name == "Fetch" else CALL_TIMEOUT_S
        try:
            if method.client_streaming:
                stub = self._stub(method, call.raw)
                for response in stub(iter(call.requests), timeout=timeout):
                    self._check_in_stream(call, response)
            else:
                self._stub(method, call.raw)(call.requests[0], timeout=timeout)
        except grpc.RpcError as error:
            tally.statuses[call.rpc][error.code().name] += 1
            reason = " ".join((error.details() or "").split()[:5])
            tally.reasons[call.rpc][f"{error.code().name}: {reason[:70]}"] += 1
            self._check_status(call, error)
            return
        tally.statuses[call.rpc]["OK"] += 1

    def _check_status(self, call: Call, error: grpc.RpcError) -> None:
        code, details = error.code(), error.details() or ""
        if code in FORBIDDEN:
            raise Violation(f"{call.rpc} answered {code.name}: {details}")
        if "Traceback" in details:
            raise Violation(f"{call.rpc} answered with a traceback: {details}")
        if not details.strip():
            raise Violation(f"{call.rpc} answered {code.name} without a message")
        if code == grpc.StatusCode.DEADLINE_EXCEEDED and call.method.name != "Fetch":
            raise Violation(f"{call.rpc} did not answer within {CALL_TIMEOUT_S} s")
        if code == grpc.StatusCode.UNAVAILABLE and not self.broker_alive():
            raise Violation(f"the broker died during {call.rpc}: {details}")

    def _check_in_stream(self, call: Call, response) -> None:
        kind = response.WhichOneof("response")
        if kind == "error":
            code, message = response.error.code, response.error.message
        elif kind == "done" and response.done.error_code:
            code, message = response.done.error_code, response.done.error_message
        else:
            return
        self.tally.in_stream[call.rpc][code] += 1
        if code == "Internal" or not code or not message.strip() or "Traceback" in message:
            raise Violation(f"{call.rpc} answered in-stream {code!r}: {message!r}")


# ---------------------------------------------------------------- health and workload


def check_health(channel: grpc.Channel, target: Target) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    for service in ("", "stableline.v1.Broker", "stableline.v1.Admin"):
        status = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status
        if status != health_pb2.HealthCheckResponse.SERVING:
            raise Violation(f"gRPC health of {service or 'the broker'!r} is {status}")
    if target.http_url is not None:
        with urllib.request.urlopen(
            target.http_url + "/admin/v2/brokers/health",
            timeout=10,
            context=target.http_context(),
        ) as answer:
            if answer.status != 200:
                raise Violation(f"HTTP health answered {answer.status}")


def write_sentinel(target: Target) -> None:
    with target.client() as client:
        producer = client.create_producer(SENTINEL_TOPIC)
        for index in range(SENTINEL_MESSAGES):
            producer.send(f"sentinel-{index}".encode())


def normal_workload(target: Target) -> dict:
    """Produce N, consume N at READ_COMMITTED, and a committed transaction: all there."""
    topic = f"after-fuzz-{time.time_ns()}"
    with target.client() as client:
        consumer = client.subscribe(topic, "workload", initial_position=InitialPosition.Earliest)
        producer = client.create_producer(topic)
        plain = [f"plain-{i}".encode() for i in range(WORKLOAD_MESSAGES)]
        for value in plain:
            producer.send_async(value, lambda _result, _message_id: None)
        producer.flush()
        txn = client.new_transaction(timeout_ms=60_000)
        in_txn = [f"txn-{i}".encode() for i in range(10)]
        for value in in_txn:
            producer.send(value, txn=txn)
        txn.commit()
        received = []
        for _ in range(len(plain) + len(in_txn)):
            message = consumer.receive(timeout_millis=10_000)
            consumer.acknowledge(message)
            received.append(message.data())
        if received != plain + in_txn:
            raise Violation(f"the workload after fuzzing saw {len(received)} messages, wrong")
        reader = client.create_reader(SENTINEL_TOPIC, MessageId.earliest)
        sentinel = []
        while reader.has_message_available():
            sentinel.append(reader.read_next(10_000).data())
        if sentinel != [f"sentinel-{i}".encode() for i in range(SENTINEL_MESSAGES)]:
            raise Violation(f"the topic written before fuzzing has {len(sentinel)} messages")
    return {"produced": len(plain) + len(in_txn), "consumed": len(received)}


# ---------------------------------------------------------------- idle streams (--secure)


def bad_tokens(secret_key: bytes | None) -> dict[str, str]:
    """Tokens the broker must refuse, by name ("none": no token at all)."""
    tokens = {
        "none": "",
        "garbage": "not-a-token",
        # A superuser's claims signed with a key the broker does not know.
        "other-key": create_token("admin", secret_key=create_secret_key()),
    }
    if secret_key is not None:
        tokens["expired"] = jwt.encode(
            {"sub": "admin", "exp": int(time.time()) - 60}, secret_key, algorithm="HS256"
        )
    return tokens


class HeldStream:
    """A Produce stream on a connection of its own that sends `opening` (or nothing)
    and then nothing more until closed."""

    def __init__(self, target: Target, token: str | None, opening=None):
        self.channel = target.channel(token=token, own_connection=True)
        self._release = threading.Event()
        self.call = broker_pb2_grpc.BrokerStub(self.channel).Produce(self._requests(opening))

    def _requests(self, opening):
        if opening is not None:
            yield opening
        self._release.wait()

    def ended_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while not self.call.done():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)  # polling the call's end against a deadline
        return True

    def close(self) -> None:
        self._release.set()
        self.call.cancel()
        self.channel.close()


def _opening(topic: str) -> broker_pb2.ProduceRequest:
    return broker_pb2.ProduceRequest(open=broker_pb2.ProducerOpen(topic=topic))


def idle_streams_check(
    target: Target, max_connections: int | None, secret_key: bytes | None
) -> dict:
    """Streams without a valid token, silent or with a proper opening, are refused or
    ended as idle and take no slot: while they are held, authenticated producers fill
    every slot (max_connections; one more is refused), and the broker stays up."""
    held: dict[str, list[HeldStream]] = {}
    slots: list[HeldStream] = []
    try:
        for name, token in bad_tokens(secret_key).items():
            for opens in (False, True):
                shape = f"{name}, {'opening' if opens else 'silent'}"
                held[shape] = [
                    HeldStream(target, token, _opening("fuzz-idle") if opens else None)
                    for _ in range(IDLE_STREAMS_PER_SHAPE)
                ]
        for streams in held.values():
            for stream in streams:
                grpc.channel_ready_future(stream.channel).result(timeout=10)
        # The slots go to authenticated callers, as many as the broker allows.
        for index in range(max_connections or 2):
            stream = HeldStream(target, None, _opening(f"fuzz-slot-{index}"))
            slots.append(stream)
            try:
                answer = next(stream.call)
            except grpc.RpcError as error:
                raise Violation(
                    f"authenticated producer {index + 1} of {max_connections or 2} refused "
                    f"while idle streams were held: {error.code().name}: {error.details()}"
                ) from None
            if answer.WhichOneof("response") != "opened":
                raise Violation(f"authenticated producer {index + 1} answered {answer}")
        over_limit = None
        if max_connections is not None:
            extra = HeldStream(target, None, _opening("fuzz-slot-over"))
            slots.append(extra)
            try:
                next(extra.call)
            except grpc.RpcError as error:
                over_limit = error.code().name
            if over_limit != "RESOURCE_EXHAUSTED":
                raise Violation(f"a producer past max_connections answered {over_limit}")
        ended: dict[str, Counter] = {}
        for shape, streams in held.items():
            ended[shape] = Counter()
            for stream in streams:
                if not stream.ended_within(IDLE_END_WITHIN_S):
                    raise Violation(f"an idle stream ({shape}) still open {IDLE_END_WITHIN_S} s on")
                code, details = stream.call.code(), stream.call.details() or ""
                if code not in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise Violation(f"an idle stream ({shape}) ended {code.name}: {details}")
                if not details.strip() or "Traceback" in details:
                    raise Violation(f"an idle stream ({shape}) ended {code.name}: {details!r}")
                ended[shape][code.name] += 1
    finally:
        for stream in [*slots, *(s for streams in held.values() for s in streams)]:
            stream.close()
    with target.channel() as channel:
        check_health(channel, target)
    return {
        "ended": {shape: dict(codes) for shape, codes in ended.items()},
        "authenticated_slots": max_connections or 2,
        "over_limit": over_limit,
    }


# ---------------------------------------------------------------- the run


def broker_target(broker: BrokerProcess) -> Target:
    """A started broker as a Target: with --secure, its CA and superuser token."""
    if not broker.tls:
        return Target(broker.service_url, broker.http_url)
    security = broker.data_dir / "security"
    token = (security / "admin.token").read_text().strip()
    return Target(broker.service_url, broker.http_url, security / "ca.pem", token)


MISSED_RPC_EXAMPLES = 20


def fuzz(
    target: Target,
    requests: int,
    seed_value: int,
    broker_alive: Callable[[], bool] = lambda: True,
    progress: Callable[[str], None] = print,
) -> Tally:
    write_sentinel(target)
    pools = seed_workload(target)
    strategies = Strategies(pools)
    tally = Tally()
    started = time.monotonic()
    channel = target.channel()
    fuzzer = Fuzzer(channel, tally, broker_alive)

    def run(strategy: st.SearchStrategy[Call], examples: int) -> None:
        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            phases=(Phase.generate, Phase.shrink),
            suppress_health_check=list(HealthCheck),
            print_blob=True,
        )
        @seed(seed_value)
        @given(strategy)
        def one(call: Call) -> None:
            fuzzer.run(call)
            if tally.requests % HEALTH_EVERY == 0:
                if not broker_alive():
                    raise Violation("the broker process exited")
                check_health(channel, target)
            if tally.requests % PROGRESS_EVERY == 0:
                elapsed = time.monotonic() - started
                progress(
                    f"  {tally.requests:>6} requests ({tally.messages} messages) "
                    f"in {elapsed:.0f} s, {tally.requests / elapsed:.0f}/s"
                )

        one()

    try:
        run(calls(strategies), requests)
        # Hypothesis does not draw the options of one_of evenly: an RPC the run
        # happened to miss gets a short run of its own, so every one is reached.
        for method in every_method():
            if f"{method.containing_service.name}.{method.name}" not in tally.statuses:
                run(method_calls(method, strategies), MISSED_RPC_EXAMPLES)
        check_health(channel, target)
    finally:
        channel.close()
    return tally


def table(tally: Tally) -> str:
    codes = sorted({code for counts in tally.statuses.values() for code in counts})
    rows = [["rpc", *codes, "in-stream errors"]]
    for rpc in sorted(tally.statuses):
        counts = tally.statuses[rpc]
        in_stream = ", ".join(f"{c} {n}" for c, n in tally.in_stream[rpc].most_common())
        rows.append([rpc, *(str(counts.get(code, 0)) for code in codes), in_stream])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000, help="RPCs to send")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the summary here")
    parser.add_argument("--reasons", action="store_true", help="print why requests failed")
    parser.add_argument("--target", help="fuzz this broker (HOST:PORT) instead of a new one")
    parser.add_argument(
        "--secure", action="store_true", help="TLS, tokens, authorization; idle-stream check"
    )
    parser.add_argument("--token", help="a superuser token of the --secure --target")
    parser.add_argument("--tls-trust-certs-file", type=Path, help="the CA of the --secure --target")
    parser.add_argument(
        "--max-connections",
        type=int,
        help="the --secure --target's max_connections, to fill (default: 2 slots, no check "
        "of the limit)",
    )
    args = parser.parse_args(argv)
    if args.target and args.secure and not (args.token and args.tls_trust_certs_file):
        parser.error("--secure --target needs --token and --tls-trust-certs-file")
    started = time.monotonic()
    idle_streams = None
    try:
        if args.target:
            target = Target(
                f"stableline+ssl://{args.target}" if args.secure else args.target,
                None,
                args.tls_trust_certs_file,
                args.token if args.secure else None,
            )
            tally = fuzz(target, args.requests, args.seed)
            if args.secure:
                idle_streams = idle_streams_check(target, args.max_connections, None)
            workload = normal_workload(target)
            log_tracebacks = 0
        else:
            options = {}
            if args.secure:
                options = {
                    "extra_args": ["--secure"],
                    "env": {
                        "STABLELINE_MAX_CONNECTIONS": str(SECURE_MAX_CONNECTIONS),
                        "STABLELINE_CONNECTION_IDLE_TIMEOUT_S": str(SECURE_IDLE_TIMEOUT_S),
                    },
                }
            with (
                tempfile.TemporaryDirectory(prefix="stableline-fuzz-") as parent,
                temporary_broker(Path(parent), **options) as broker,
            ):
                target = broker_target(broker)
                alive = lambda: broker.process.poll() is None  # noqa: E731
                tally = fuzz(target, args.requests, args.seed, alive)
                if args.secure:
                    secret_key = (broker.data_dir / "security" / "secret.key").read_bytes()
                    idle_streams = idle_streams_check(target, SECURE_MAX_CONNECTIONS, secret_key)
                workload = normal_workload(target)
                log_tracebacks = broker.log().count("Traceback")
                if log_tracebacks:
                    print(broker.log()[-6000:], file=sys.stderr)
                    raise Violation(f"the broker logged {log_tracebacks} tracebacks")
    except Violation as violation:
        print(f"VIOLATION: {violation}", file=sys.stderr)
        return 1
    elapsed = time.monotonic() - started
    print(table(tally))
    if args.reasons:
        for rpc in sorted(tally.reasons):
            print(f"\n{rpc}:")
            for reason, count in tally.reasons[rpc].most_common(8):
                print(f"  {count:>6}  {reason}")
    print(
        f"\n{tally.requests} requests ({tally.messages} stream messages and unary requests) "
        f"in {elapsed:.0f} s; broker up throughout; workload after: "
        f"{workload['produced']} produced, {workload['consumed']} consumed; 0 violations"
    )
    if idle_streams is not None:
        print(
            f"idle streams without a valid token: {json.dumps(idle_streams['ended'])}; "
            f"{idle_streams['authenticated_slots']} authenticated producers opened meanwhile, "
            f"one more: {idle_streams['over_limit']}"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "requests": tally.requests,
                    "messages": tally.messages,
                    "seconds": round(elapsed, 1),
                    "statuses": {rpc: dict(c) for rpc, c in tally.statuses.items()},
                    "in_stream": {rpc: dict(c) for rpc, c in tally.in_stream.items()},
                    "workload": workload,
                    "idle_streams": idle_streams,
                    "violations": 0,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
