"""Fuzz a real broker's Kafka port with random and damaged Kafka requests.

Requests are built from Kafka's own message specs as kafka-python carries them
(clients/src/main/resources/common/message/*.json): for every API and version the
broker serves (its ApiVersions answer, so APIs added later are fuzzed too), random
field values biased toward what the broker knows (a few topics, one partitioned,
partitions 0-2 and beyond, offsets at the edges, real record batches, names of
groups and transactional ids), sent as they are or damaged (bytes flipped,
truncated, extended), mixed with requests of APIs and versions it does not serve,
random bytes behind a valid header, and frames that lie about their size.

Promises checked (each breach is a violation, exit status 1):
- A well-formed request of a served API gets an answer with its correlation id,
  and its connection stays open (but after a SASL request the broker may close it,
  as Kafka does; a Produce with acks 0 gets no answer; a Fetch may wait out its
  long poll).
- Anything else gets an answer or its connection closed, never anything else:
  the broker's log shows no traceback (a request that fails inside the broker is
  logged with one).
- A frame announcing more than the limit is refused before it is read.
- The broker stays up: every HEALTH_EVERY requests a new connection's ApiVersions
  is answered, and the process runs.
- Nothing is lost: a topic written before the fuzzing (never named by it) reads
  back whole at the same offsets, and afterwards a normal workload (confluent-kafka
  produces N, kafka-python reads them back) sees all of it.

With --secure the broker runs `serve --secure` (TLS, tokens, authorization): the
fuzzing goes over SASL_SSL as a superuser, and one request in eight goes on a new
connection that never authenticated, which must be closed unanswered unless it is
ApiVersions or a SASL request.

    python scripts/fuzz/fuzz_kafka.py [--requests 5000] [--seed S] [--json PATH] [--secure]
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import random
import socket
import ssl
import struct
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import kafka.protocol
from kafka.protocol.api_message import ApiMessage
from kafka.record.default_records import DefaultRecordBatchBuilder

from stableline.broker.security.tokens import create_token, read_secret_key
from stableline.testing import BrokerProcess, temporary_broker

API_VERSIONS = 18
PRODUCE = 0
FETCH = 1
SASL_APIS = frozenset({17, 36})
ANSWER_TIMEOUT_S = 3.0
HEALTH_EVERY = 200
PROGRESS_EVERY = 1000
SENTINEL_TOPIC = "fuzz-sentinel"  # written before, never named by a fuzzed request
SENTINEL_MESSAGES = 50
WORKLOAD_MESSAGES = 200
TOPICS = ["fuzz-a", "fuzz-b", "fuzz-parted", "fuzz-new", "", "-", "a" * 300, "no/slash"]
PARTITIONED_TOPIC = "fuzz-parted"
NAMES = ["fuzz-group", "fuzz-txn", "", "x" * 200]
# The fuzzed broker's limits: what a damaged CreateTopics could ask for stays small.
BROKER_ENV = {
    "STABLELINE_MAX_NUM_PARTITIONS_PER_PARTITIONED_TOPIC": "8",
    "STABLELINE_MAX_TOPICS_PER_NAMESPACE": "500",
}


class Violation(AssertionError):
    """The broker answered in a way it promised never to."""


# ------------------------------------------------------------------ request shapes


def request_classes() -> dict[int, type[ApiMessage]]:
    """kafka-python's request class of every API key it knows."""
    for module in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
        if ".old" not in module.name and ".schemas" not in module.name:
            importlib.import_module(module.name)
    found: dict[int, type[ApiMessage]] = {}
    pending = list(ApiMessage.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls._class_version is None and cls.is_request():
            found.setdefault(cls.API_KEY, cls)
    return found


class Builder:
    """Random values for a message's fields, from its spec, biased toward the
    broker's topics and the edges of each type."""

    def __init__(self, rng: random.Random, record_batch: bytes):
        self.rng = rng
        self.record_batch = record_batch

    def message(self, cls: type[ApiMessage], version: int) -> ApiMessage:
        return cls(version=version, **self.fields(cls._struct, version, ""))

    def fields(self, struct, version: int, parent: str) -> dict[str, Any]:
        values = {}
        for name, field in struct.fields.items():
            if field.for_version_q(version):
                values[name] = self.value(field, version, parent)
        return values

    def value(self, field, version: int, parent: str) -> Any:
        rng = self.rng
        if field.nullable_for_version_q(version) and rng.random() < 0.1:
            return None
        if field.is_struct_array():
            return [
                field(**self.fields(field, version, field.name))
                for _ in range(rng.choice([0, 1, 1, 2, 3]))
            ]
        if field.is_struct():
            return field(**self.fields(field, version, field.name))
        if field.is_array():
            inner = field.array_of
            return [
                self.simple(inner._type_str, field.name, parent)
                for _ in range(rng.choice([0, 1, 2]))
            ]
        return self.simple(field._type_str, field.name, parent)

    def simple(self, kind: str, name: str, parent: str) -> Any:
        rng = self.rng
        if kind == "string":
            if "topic" in name or ("topic" in parent and name == "name"):
                return rng.choice(TOPICS)
            if "id" in name or "group" in name or name == "name":
                return rng.choice(NAMES)
            if name == "mechanism":
                return rng.choice(["PLAIN", "SCRAM-SHA-256", ""])
            return rng.choice(["", "x", "fuzz", "\u00e9" * 3])
        if kind == "bool":
            return rng.random() < 0.5
        if kind in ("int8", "int16", "int32", "int64", "uint16"):
            bits = {"int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint16": 16}[kind]
            if "partition" in name:
                return rng.choice([0, 0, 1, 2, 7, -1])
            if "timeout" in name or "wait" in name:
                return rng.choice([0, 10, 100])
            if name == "acks":
                return rng.choice([-1, 1, 0, 2])
            if "isolation" in name:
                return rng.choice([0, 1, 5])
            if "offset" in name or "timestamp" in name:
                return rng.choice([0, 1, 5, -1, -2, 2**40])
            low, high = (
                (0, 2**bits - 1) if kind == "uint16" else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
            )
            return rng.choice([0, 1, 2, 3, -1, low, high, rng.randint(low, high)])
        if kind == "float64":
            return rng.random()
        if kind == "uuid":
            return uuid.UUID(int=rng.getrandbits(128)) if rng.random() < 0.5 else uuid.UUID(int=0)
        if kind == "records":
            return self.record_batch if rng.random() < 0.7 else rng.randbytes(rng.randrange(80))
        if kind == "bytes":
            if name == "auth_bytes":
                return b"\0fuzz\0" + rng.randbytes(rng.randrange(40))
            return rng.randbytes(rng.randrange(40))
        raise ValueError(f"no values for field type {kind!r}")


def record_batch() -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for offset in range(3):
        builder.append(offset, timestamp=None, key=b"k", value=b"fuzz-%d" % offset, headers=[])
    return bytes(builder.build())


def header(api_key: int, version: int, correlation_id: int, flexible: bool) -> bytes:
    data = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"fuzz"
    return data + (b"\x00" if flexible else b"")


# ------------------------------------------------------------------ the connection


class Connection:
    """One Kafka connection: TLS and SASL/PLAIN with `token` when given."""

    def __init__(self, port: int, ca_file: Path | None, token: str | None):
        sock = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT_S)
        if ca_file is not None:
            context = ssl.create_default_context(cafile=str(ca_file))
            sock = context.wrap_socket(sock, server_hostname="127.0.0.1")
        self.sock = sock
        self.correlation = 1000
        if token is not None:
            self._authenticate(token)

    def _authenticate(self, token: str) -> None:
        classes = request_classes()
        for cls, version, value in (
            (classes[17], 1, {"mechanism": "PLAIN"}),
            (classes[36], 1, {"auth_bytes": b"\0fuzz\0" + token.encode()}),
        ):
            outcome, answer = self.exchange(
                header(cls.API_KEY, version, self.next_id(), False)
                + cls(version=version, **value).encode(version=version)
            )
            if outcome != "answered" or struct.unpack(">h", answer[4:6])[0] != 0:
                raise Violation(f"SASL with a superuser token failed: {outcome} {answer!r}")

    def next_id(self) -> int:
        self.correlation += 1
        return self.correlation

    def close(self) -> None:
        self.sock.close()

    def send_only(self, frame: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)

    def exchange(self, frame: bytes, raw_size: int | None = None) -> tuple[str, bytes]:
        """("answered", response) | ("closed", b"") | ("silent", b"")."""
        size = len(frame) if raw_size is None else raw_size
        try:
            self.sock.sendall(struct.pack(">i", size) + frame)
            head = self._exactly(4)
            (length,) = struct.unpack(">i", head)
            return "answered", self._exactly(length)
        except TimeoutError:
            return "silent", b""
        except (ConnectionError, ssl.SSLError, OSError, EOFError):
            return "closed", b""

    def _exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise EOFError("closed")
            data += chunk
        return data


# ------------------------------------------------------------------ the run


class Tally:
    def __init__(self) -> None:
        self.requests = 0
        self.outcomes: dict[str, Counter] = defaultdict(Counter)

    def count(self, kind: str, outcome: str) -> None:
        self.requests += 1
        self.outcomes[kind][outcome] += 1


class Fuzzer:
    def __init__(self, broker: BrokerProcess, rng: random.Random, secure: bool):
        self.broker = broker
        self.rng = rng
        self.secure = secure
        self.ca_file = broker.data_dir / "security" / "ca.pem" if secure else None
        self.token = None
        if secure:
            secret = read_secret_key(broker.data_dir / "security" / "secret.key")
            self.token = create_token("admin", secret_key=secret)
        self.classes = request_classes()
        self.builder = Builder(rng, record_batch())
        self.served = self._served()
        self.connection: Connection | None = None
        self.tally = Tally()

    def connect(self, authenticated: bool = True) -> Connection:
        return Connection(
            self.broker.kafka_port, self.ca_file, self.token if authenticated else None
        )

    def _served(self) -> dict[int, tuple[int, int]]:
        connection = self.connect()
        try:
            outcome, answer = connection.exchange(header(API_VERSIONS, 0, 1, False))
        finally:
            connection.close()
        if outcome != "answered":
            raise Violation(f"ApiVersions v0 was {outcome}")
        count = struct.unpack(">i", answer[6:10])[0]
        served = {}
        for index in range(count):
            key, low, high = struct.unpack(">hhh", answer[10 + 6 * index : 16 + 6 * index])
            served[key] = (low, high)
        return served

    def flexible(self, api_key: int, version: int) -> bool:
        cls = self.classes.get(api_key)
        # ApiVersions' request header stays v1 below its flexible versions only.
        return cls is not None and cls.flexible_version_q(version)

    def build(self, api_key: int, version: int, correlation_id: int) -> bytes:
        return self.build_message(api_key, version, correlation_id)[0]

    def build_message(
        self, api_key: int, version: int, correlation_id: int
    ) -> tuple[bytes, ApiMessage]:
        message = self.builder.message(self.classes[api_key], version)
        frame = header(api_key, version, correlation_id, self.flexible(api_key, version))
        return frame + message.encode(version=version), message

    def one(self) -> None:
        rng = self.rng
        if self.connection is None:
            self.connection = self.connect()
        connection = self.connection
        correlation_id = connection.next_id()
        roll = rng.random()
        api_key = rng.choice(sorted(self.served))
        low, high = self.served[api_key]
        version = rng.randint(low, high)
        if roll < 0.45:
            kind = "valid"
            frame, message = self.build_message(api_key, version, correlation_id)
            if api_key == PRODUCE and message.acks == 0:
                # Kafka answers acks=0 with nothing: sent, and the connection left.
                connection.send_only(frame)
                self.tally.count(f"{kind} {api_key}", "sent (acks 0)")
                self._drop()
                return
        elif roll < 0.75:
            kind, frame = "damaged", bytearray(self.build(api_key, version, correlation_id))
            how = rng.choice(["flip", "truncate", "extend"])
            if how == "flip" and len(frame) > 8:
                for _ in range(rng.randint(1, 6)):
                    frame[rng.randrange(8, len(frame))] = rng.randrange(256)
            elif how == "truncate":
                del frame[rng.randrange(8, len(frame) + 1) :]
            else:
                frame += rng.randbytes(rng.randint(1, 32))
            frame = bytes(frame)
        elif roll < 0.85:
            # An API or version the broker does not serve, well formed if kafka-python knows it.
            unserved = [k for k in self.classes if k not in self.served]
            if rng.random() < 0.5 and unserved:
                api_key = rng.choice(unserved)
                version = rng.randint(0, self.classes[api_key].max_version)
            else:
                version = high + rng.randint(1, 3)
            kind = "unserved"
            frame = header(api_key, version, correlation_id, False) + rng.randbytes(
                rng.randrange(32)
            )
        elif roll < 0.95:
            api_key = rng.choice([*self.served, rng.randrange(-3, 80)])
            kind = "random"
            frame = header(api_key, rng.randrange(0, 16), correlation_id, False) + rng.randbytes(
                rng.randrange(64)
            )
        else:
            kind = "bad size"
            frame = header(API_VERSIONS, 0, correlation_id, False)
            size = rng.choice([-1, -(2**31), 2**31 - 1, 1 << 30])
            outcome, _ = connection.exchange(frame, raw_size=size)
            self.tally.count(kind, outcome)
            if outcome == "answered":
                raise Violation(f"a frame announcing {size} bytes was answered")
            self._drop()
            return
        outcome, answer = connection.exchange(frame)
        self.tally.count(f"{kind} {api_key}", outcome)
        if outcome == "answered" and struct.unpack(">i", answer[:4])[0] != correlation_id:
            raise Violation(f"{kind} api {api_key} v{version}: answered another correlation id")
        if kind == "valid" and outcome != "answered":
            allowed = api_key in SASL_APIS and outcome == "closed"
            allowed |= api_key in (PRODUCE, FETCH) and outcome == "silent"
            if not allowed:
                raise Violation(f"a well-formed {kind} api {api_key} v{version} was {outcome}")
        if outcome != "answered" or api_key in SASL_APIS:
            self._drop()  # after a SASL request the broker may close it, having answered

    def unauthenticated(self) -> None:
        """A request on a connection that never authenticated (secure runs)."""
        connection = self.connect(authenticated=False)
        try:
            api_key = self.rng.choice(sorted(self.served))
            low, high = self.served[api_key]
            version = self.rng.randint(low, high)
            outcome, _ = connection.exchange(self.build(api_key, version, connection.next_id()))
        finally:
            connection.close()
        self.tally.count(f"unauthenticated {api_key}", outcome)
        open_before_auth = api_key == API_VERSIONS or api_key in SASL_APIS
        if not open_before_auth and outcome != "closed":
            raise Violation(f"api {api_key} before authentication was {outcome}, not closed")

    def _drop(self) -> None:
        if self.connection is not None:
            self.connection.close()
        self.connection = None

    def healthy(self) -> None:
        if self.broker.process.poll() is not None:
            raise Violation(f"the broker exited with {self.broker.process.returncode}")
        connection = self.connect()
        try:
            outcome, _ = connection.exchange(header(API_VERSIONS, 0, 7, False))
        finally:
            connection.close()
        if outcome != "answered":
            raise Violation(f"a health check's ApiVersions was {outcome}")

    def run(self, requests: int) -> Tally:
        for number in range(1, requests + 1):
            if self.secure and self.rng.random() < 1 / 8:
                self.unauthenticated()
            else:
                self.one()
            if number % HEALTH_EVERY == 0:
                self.healthy()
            if number % PROGRESS_EVERY == 0:
                print(f"{number} requests", flush=True)
        self._drop()
        self.healthy()
        return self.tally


# ------------------------------------------------------------------ before and after


def client_settings(broker: BrokerProcess, fuzzer: Fuzzer) -> dict:
    if not fuzzer.secure:
        return {}
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "admin",
        "sasl.password": fuzzer.token,
        "ssl.ca.location": str(fuzzer.ca_file),
    }


def produce(bootstrap: str, topic: str, values: list[bytes], settings: dict) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **settings})
    failures = []
    for value in values:
        producer.produce(topic, value=value, on_delivery=lambda e, _m: e and failures.append(e))
    if producer.flush(30) != 0 or failures:
        raise Violation(f"producing to {topic} failed: {failures[:3]}")


def consume(bootstrap: str, topic: str, count: int, settings: dict) -> list[tuple[int, bytes]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "fuzz-check", "enable.auto.commit": False}
        | settings
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return got


def fuzz_broker(requests: int, seed: int, secure: bool) -> dict:
    rng = random.Random(seed)
    options: dict[str, Any] = {"kafka_port": 0, "env": BROKER_ENV}
    if secure:
        options["extra_args"] = ["--secure"]
    with (
        tempfile.TemporaryDirectory(prefix="stableline-fuzz-kafka-") as parent,
        temporary_broker(Path(parent), **options) as broker,
    ):
        try:
            return _fuzz(broker, rng, requests, secure)
        except Violation:
            print(broker.log()[-4000:], file=sys.stderr)
            raise


def _fuzz(broker: BrokerProcess, rng: random.Random, requests: int, secure: bool) -> dict:
    """A sentinel topic written, the fuzzing, then the checks that nothing was lost."""
    fuzzer = Fuzzer(broker, rng, secure)
    settings = client_settings(broker, fuzzer)
    bootstrap = broker.kafka_bootstrap
    sentinel = [f"sentinel-{i}".encode() for i in range(SENTINEL_MESSAGES)]
    produce(bootstrap, SENTINEL_TOPIC, sentinel, settings)
    _partitioned(broker, fuzzer)
    started = time.monotonic()
    tally = fuzzer.run(requests)
    elapsed = time.monotonic() - started
    if consume(bootstrap, SENTINEL_TOPIC, SENTINEL_MESSAGES, settings) != list(enumerate(sentinel)):
        raise Violation(f"{SENTINEL_TOPIC}, written before the fuzzing, did not read back whole")
    workload = [f"after-{i}".encode() for i in range(WORKLOAD_MESSAGES)]
    produce(bootstrap, "fuzz-workload", workload, settings)
    consumed = consume(bootstrap, "fuzz-workload", WORKLOAD_MESSAGES, settings)
    if [value for _, value in consumed] != workload:
        raise Violation(f"the workload after read {len(consumed)} of {WORKLOAD_MESSAGES}")
    log = broker.log()
    if "Traceback" in log:
        print(log[-6000:], file=sys.stderr)
        raise Violation(f"the broker logged {log.count('Traceback')} tracebacks")
    if broker.process.poll() is not None:
        raise Violation("the broker exited")
    return {
        "requests": tally.requests,
        "seconds": round(elapsed, 1),
        "outcomes": {kind: dict(counts) for kind, counts in sorted(tally.outcomes.items())},
        "served": {str(k): list(v) for k, v in sorted(fuzzer.served.items())},
        "workload": {"produced": WORKLOAD_MESSAGES, "consumed": len(consumed)},
        "sentinel": SENTINEL_MESSAGES,
        "violations": 0,
    }


def _partitioned(broker: BrokerProcess, fuzzer: Fuzzer) -> None:
    """PARTITIONED_TOPIC with three partitions, by CreateTopics."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(
        {"bootstrap.servers": broker.kafka_bootstrap} | client_settings(broker, fuzzer)
    )
    admin.create_topics([NewTopic(PARTITIONED_TOPIC, 3)])[PARTITIONED_TOPIC].result(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the summary here")
    parser.add_argument("--secure", action="store_true", help="serve --secure: SASL_SSL")
    args = parser.parse_args(argv)
    try:
        summary = fuzz_broker(args.requests, args.seed, args.secure)
    except Violation as violation:
        print(f"VIOLATION: {violation}", file=sys.stderr)
        return 1
    width = max(len(kind) for kind in summary["outcomes"])
    for kind, counts in summary["outcomes"].items():
        print(f"{kind:<{width}}  " + "  ".join(f"{o} {n}" for o, n in sorted(counts.items())))
    print(
        f"\n{summary['requests']} requests in {summary['seconds']} s; broker up throughout; "
        f"the sentinel topic whole; workload after: {summary['workload']['consumed']} of "
        f"{summary['workload']['produced']} read back; 0 violations"
    )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
