"""Topic lookup on one broker, against a real broker process: the gRPC Lookup RPC,
Pulsar's HTTP /lookup/v2/topic/... path, the SDK's lookup_topic and the CLI's
`admin topics lookup` all name this broker's advertised addresses, and create
nothing."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator

import grpc
import pytest

import stableline
import stableline.aio
from stableline._proto import broker_pb2 as pb
from stableline._proto import broker_pb2_grpc
from stableline.testing import BrokerProcess

LOOKUP_PATH = "/lookup/v2/topic/persistent/public/default/"


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("lookup") / "data")
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log()


@pytest.fixture(scope="module")
def stub(broker) -> Iterator[broker_pb2_grpc.BrokerStub]:
    with grpc.insecure_channel(broker.service_url) as channel:
        yield broker_pb2_grpc.BrokerStub(channel)


def _http(broker: BrokerProcess, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(broker.http_url + path, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _topics(broker: BrokerProcess) -> list[str]:
    return _http(broker, "/admin/v2/persistent/public/default")[1]


def test_grpc_lookup_names_this_broker_for_an_existing_topic(broker, stub):
    with stableline.Client(broker.service_url) as client:
        client.create_producer("looked-up").send(b"x")
    answer = stub.Lookup(pb.LookupRequest(topic="looked-up"), timeout=10)
    assert answer.topic == "persistent://public/default/looked-up"
    assert answer.grpc_address == f"127.0.0.1:{broker.grpc_port}"
    assert answer.http_address == f"127.0.0.1:{broker.http_port}"
    assert answer.service_url == f"stableline://127.0.0.1:{broker.grpc_port}"
    assert answer.http_url == broker.http_url
    assert not answer.tls and answer.action == pb.LOOKUP_ACTION_CONNECT


def test_lookup_of_a_missing_topic_that_first_use_would_create_answers_and_creates_nothing(
    broker, stub
):
    answer = stub.Lookup(pb.LookupRequest(topic="persistent://public/default/not-yet"))
    assert answer.grpc_address == f"127.0.0.1:{broker.grpc_port}"
    assert _http(broker, LOOKUP_PATH + "not-yet")[0] == 200
    assert "persistent://public/default/not-yet" not in _topics(broker)


@pytest.mark.parametrize(
    "name", ["", "bad name", "non-persistent://public/default/t", "a/b/c/d", "x" * 300]
)
def test_grpc_lookup_of_an_invalid_topic_name_is_invalid_argument(stub, name):
    with pytest.raises(grpc.RpcError) as refused:
        stub.Lookup(pb.LookupRequest(topic=name), timeout=10)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "topic name" in refused.value.details()
    assert ("stableline-error", "InvalidTopicName") in refused.value.trailing_metadata()


def test_http_lookup_answers_pulsar_lookup_data(broker):
    status, body = _http(broker, LOOKUP_PATH + "orders")
    assert status == 200
    url = f"stableline://127.0.0.1:{broker.grpc_port}"
    assert body == {
        "brokerUrl": url,
        "brokerUrlTls": None,
        "httpUrl": broker.http_url,
        "httpUrlTls": None,
        "nativeUrl": url,
    }
    # What brokerUrl names is what a client connects to.
    with stableline.Client(body["brokerUrl"]) as client:
        assert client.create_producer("orders").send(b"o") is not None


def test_http_lookup_of_an_invalid_name_is_400(broker):
    status, body = _http(broker, LOOKUP_PATH + "bad%20name")
    assert status == 400 and "invalid topic name" in body["reason"]


def test_both_sdk_faces_look_a_topic_up(broker):
    expected = stableline.LookupResult(
        topic="persistent://public/default/sdk",
        broker_url=f"stableline://127.0.0.1:{broker.grpc_port}",
        http_url=broker.http_url,
        grpc_address=f"127.0.0.1:{broker.grpc_port}",
        http_address=f"127.0.0.1:{broker.http_port}",
        tls=False,
    )
    with stableline.Client(broker.service_url) as client:
        assert client.lookup_topic("sdk") == expected
        with pytest.raises(stableline.InvalidTopicName):
            client.lookup_topic("bad name")

    async def looked_up() -> stableline.LookupResult:
        async with stableline.aio.Client(broker.service_url) as client:
            return await client.lookup_topic("persistent://public/default/sdk")

    assert asyncio.run(looked_up()) == expected


def test_the_cli_prints_the_broker_url_as_pulsar_admin_does_then_the_http_url(broker):
    command = ["admin", "topics", "lookup", "cli-looked-up", "--admin-url", broker.http_url]
    result = subprocess.run(
        [sys.executable, "-m", "stableline", *command],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"stableline://127.0.0.1:{broker.grpc_port}",
        f"http://127.0.0.1:{broker.http_port}",
    ]


def test_advertised_addresses_name_a_wildcard_listen_host_by_this_machine_s_name():
    import socket

    from stableline.broker.cluster.lookup import BrokerAddresses

    plain = BrokerAddresses.advertised("0.0.0.0:6650", 6650, "[::1]:0", 8081, tls=False)
    assert plain.grpc_address == f"{socket.getfqdn()}:6650"
    assert plain.http_address == "[::1]:8081" and plain.http_url == "http://[::1]:8081"
    secure = BrokerAddresses.advertised("broker-1:0", 6651, "broker-1:8443", 8443, tls=True)
    assert secure.service_url == "stableline+ssl://broker-1:6651"
    assert secure.http_url == "https://broker-1:8443"
