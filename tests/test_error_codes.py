"""One error table (stableline/error_codes.py) holds the broker, its three faces and
the client together: every code the broker can send is known to the client, every
broker exception states a code of the table, and each face reports a code as the
table's row says. Last, a real broker refuses a few requests and the client raises
the typed exception."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import signal

import grpc
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

import stableline
import stableline.aio
import stableline.broker
from stableline import _errors as client_errors
from stableline.broker.errors import FOREIGN_CODES, BrokerError, Refusal, code_of
from stableline.broker.grpc.errors import classify
from stableline.broker.http.errors import errors as http_errors_middleware
from stableline.broker.kafka.protocol import messages as kafka_messages
from stableline.broker.kafka.server.errors import kafka_error
from stableline.error_codes import ERROR_CODES, ROWS, KafkaError
from stableline.testing import BrokerProcess
from tests.stableline.broker.security.test_connection_slots import SilentStream

# Exception classes of the broker that are not broker errors, and why.
NOT_BROKER_ERRORS = {
    # A failpoint stands in for an unexpected failure: it must look like one.
    "stableline.broker.failpoints.InjectedFault",
    # A refusal carrying Kafka's own error code, answered inside the Kafka face.
    "stableline.broker.kafka.coordinator.txn_coordinator.TxnRefused",
    # Closes a Kafka connection; never reported as an error.
    "stableline.broker.kafka.server.sasl.ConnectionRefused",
}
# The Kafka wire codec's errors are the codec's own (it imports nothing of the broker).
CODEC_PACKAGE = "stableline.broker.kafka.protocol."
# Codes only the client raises (no broker sends them).
CLIENT_ONLY_CODES = {"OperationNotSupported"}


def broker_exception_classes() -> list[type[BaseException]]:
    found = []
    for module_info in pkgutil.walk_packages(stableline.broker.__path__, "stableline.broker."):
        module = importlib.import_module(module_info.name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module_info.name
            ):
                found.append(value)
    return found


def qualified(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


# ---------------------------------------------------------------- the client


def test_every_code_in_the_table_is_known_to_the_client():
    assert sorted(set(ERROR_CODES) - set(client_errors.CODES)) == []


def test_the_client_knows_no_code_the_table_does_not_hold():
    assert set(client_errors.CODES) - set(ERROR_CODES) == CLIENT_ONLY_CODES


@pytest.mark.parametrize("code", sorted(ERROR_CODES))
def test_each_code_raises_a_public_typed_exception_in_both_clients(code):
    kind = client_errors.CODES[code]
    assert issubclass(kind, stableline.StableLineError)
    assert getattr(stableline, kind.__name__) is kind
    assert getattr(stableline.aio, kind.__name__) is kind
    assert type(client_errors.from_code(code, "why")) is kind


@pytest.mark.parametrize(
    ("code", "was"),
    [
        ("TooManyTopics", stableline.LimitExceeded),
        ("MetadataStoreUnavailable", stableline.BrokerUnavailable),
        ("IdleStream", stableline.Timeout),
        ("BrokerUnavailable", stableline.BrokerUnavailable),
        ("Internal", stableline.StableLineError),
    ],
)
def test_a_newly_typed_code_is_still_the_exception_it_was_raised_as(code, was):
    """Before the client knew these codes it raised them by their gRPC status."""
    assert isinstance(client_errors.from_code(code, "why"), was)
    assert (
        client_errors.STATUSES.get(ERROR_CODES[code].grpc_status, stableline.StableLineError) is was
    )


# ---------------------------------------------------------------- the broker


def test_every_broker_exception_derives_from_broker_error():
    loose = [
        qualified(kind)
        for kind in broker_exception_classes()
        if not issubclass(kind, BrokerError)
        and qualified(kind) not in NOT_BROKER_ERRORS
        and not kind.__module__.startswith(CODEC_PACKAGE)
    ]
    assert loose == []


def test_every_broker_error_states_a_code_of_the_table():
    unknown = {
        qualified(kind): kind.code
        for kind in broker_exception_classes()
        if issubclass(kind, BrokerError) and kind.code not in ERROR_CODES
    }
    assert unknown == {}


def test_broker_errors_keep_their_other_bases():
    from stableline.broker.topics.partitioned import InvalidPartitionCountError
    from stableline.broker.topics.registry import TopicNotFoundError

    assert issubclass(TopicNotFoundError, LookupError)
    assert issubclass(InvalidPartitionCountError, ValueError)
    assert code_of(InvalidPartitionCountError("bad")) == "InvalidArgument"


def test_every_foreign_exception_maps_to_a_code_of_the_table():
    assert [code for _, code in FOREIGN_CODES if code not in ERROR_CODES] == []
    # A subclass is listed before its base, or its own code would never be reached.
    kinds = [kind for kind, _ in FOREIGN_CODES]
    for index, kind in enumerate(kinds):
        assert not any(issubclass(kind, earlier) for earlier in kinds[:index]), kind


def test_an_unexpected_error_is_internal_and_a_bad_value_invalid():
    assert code_of(RuntimeError("boom")) == "Internal"
    assert code_of(ValueError("bad")) == "InvalidArgument"


# ---------------------------------------------------------------- the faces


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.code)
def test_the_grpc_face_sends_the_tables_status_and_the_code(row):
    refusal = classify(Refusal(row.code, "why"))
    assert (refusal.status, refusal.code) == (row.grpc_status, row.code)


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.code)
def test_the_kafka_face_answers_the_tables_kafka_code(row):
    expected = kafka_messages.ErrorCode.UNKNOWN_SERVER_ERROR
    if row.kafka_error is not None:
        expected = kafka_messages.ErrorCode[row.kafka_error.name]
    assert kafka_error(Refusal(row.code, "why")) is expected


def test_the_tables_kafka_codes_are_kafkas():
    for error in KafkaError:
        assert kafka_messages.ErrorCode[error.name] == error.value


async def _http_answer(error: BaseException) -> tuple[int, dict]:
    async def handler(request: web.Request) -> web.Response:
        raise error

    app = web.Application(middlewares=[http_errors_middleware])
    app.router.add_get("/", handler)
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/", allow_redirects=False)
        return response.status, await response.json()


@pytest.mark.parametrize(
    "row", [row for row in ROWS if row.code != "NotOwner"], ids=lambda row: row.code
)
async def test_the_http_face_answers_the_tables_status(row):
    status, body = await _http_answer(Refusal(row.code, "why"))
    assert status == row.http_status
    assert body["reason"] == "why" or row.code == "Internal"


async def test_the_http_face_hides_an_internal_errors_text_behind_an_id():
    status, body = await _http_answer(RuntimeError("secret path /var/x"))
    assert status == 500
    assert "secret" not in body["reason"] and "internal error (id " in body["reason"]


# ---------------------------------------------------------------- a real broker

MAX_TOPICS = 2


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    directory = tmp_path_factory.mktemp("error-codes")
    config = directory / "broker.toml"
    config.write_text(f"max_topics_per_namespace = {MAX_TOPICS}\n")
    failing = "persistent://public/failing/topic"
    process = BrokerProcess(
        directory / "data",
        extra_args=["--config", str(config)],
        env={
            "STABLELINE_CONNECTION_IDLE_TIMEOUT_S": "1",
            "STABLELINE_FAILPOINTS": f"internal-error:{failing}",
        },
    )
    process.start()
    try:
        process.failing_topic = failing
        yield process
    finally:
        process.signal(signal.SIGUSR1)  # release the failpoint before stopping
        assert process.stop() == 0, process.log()


def test_a_real_broker_refusals_reach_the_client_as_typed_exceptions(broker):
    with stableline.Client(broker.service_url) as client:
        for index in range(MAX_TOPICS):
            client.create_producer(f"persistent://public/full/t{index}").close()
        with pytest.raises(stableline.TooManyTopics, match="max_topics_per_namespace"):
            client.create_producer("persistent://public/full/one-too-many")

        producer = client.create_producer(broker.failing_topic)
        with pytest.raises(stableline.InternalError, match=r"internal error \(id [0-9a-f]{8}\)"):
            producer.send(b"refused")

    stream = SilentStream(broker)
    try:
        grpc.channel_ready_future(stream.channel).result(timeout=10)
        assert stream.call.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        error = client_errors.from_rpc_error(stream.call)
        assert isinstance(error, stableline.IdleStream), error
    finally:
        stream.close()
