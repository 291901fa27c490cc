"""Who may look a topic up, on a real `serve --secure` broker: produce or consume on
the topic (Pulsar's lookup right) over gRPC, the SDK, HTTP and the CLI; a missing
topic is answered only to a role whose first use would create it."""

from __future__ import annotations

import itertools
import os
import ssl
import subprocess
import sys

import grpc
import pytest

import stableline
from stableline._proto import broker_pb2 as pb
from stableline._proto import broker_pb2_grpc
from tests.stableline.broker.security.conftest import SUPERUSER, http

_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


def lookup_path(namespace: str, topic: str) -> str:
    return f"/lookup/v2/topic/persistent/{namespace}/{topic}"


def make_topic(secure_broker, namespace: str, prefix: str) -> str:
    topic = unique(prefix)
    status, body = secure_broker.http("PUT", f"/admin/v2/persistent/{namespace}/{topic}")
    assert status == 204, body
    return topic


def test_a_role_without_rights_on_the_topic_is_refused_on_every_face(secure_broker):
    topic = make_topic(secure_broker, "public/default", "private")
    with (
        secure_broker.client("stranger") as stranger,
        pytest.raises(stableline.AuthorizationError, match="may not look up"),
    ):
        stranger.lookup_topic(topic)
    with secure_broker.channel() as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.Lookup(pb.LookupRequest(topic=topic), metadata=secure_broker.metadata("stranger"))
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(grpc.RpcError) as anonymous:
            stub.Lookup(pb.LookupRequest(topic=topic))
        assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED
    status, body = secure_broker.http("GET", lookup_path("public/default", topic), "stranger")
    assert status == 403 and "needs produce or consume" in body["reason"]
    context = ssl.create_default_context(cafile=str(secure_broker.security_dir / "ca.pem"))
    status, _ = http(
        secure_broker.process, "GET", lookup_path("public/default", topic), None, context=context
    )
    assert status == 401


@pytest.mark.parametrize("right", ["consume", "produce"])
def test_either_right_on_the_topic_allows_a_lookup_of_it(secure_broker, right):
    namespace = f"{right}-lookup/ns"
    secure_broker.grant(f"{right}r", [right], namespace)
    topic = make_topic(secure_broker, namespace, "granted")
    with secure_broker.client(f"{right}r") as client:
        answer = client.lookup_topic(f"persistent://{namespace}/{topic}")
    grpc_address = f"127.0.0.1:{secure_broker.process.grpc_port}"
    assert answer.tls and answer.broker_url == f"stableline+ssl://{grpc_address}"
    assert answer.http_url == secure_broker.process.http_url
    status, body = secure_broker.http("GET", lookup_path(namespace, topic), f"{right}r")
    assert status == 200, body
    # One port serves TLS only: the plaintext URLs are null, as Pulsar leaves a
    # listener it does not have.
    assert body["brokerUrl"] is None and body["httpUrl"] is None
    assert body["brokerUrlTls"] == body["nativeUrl"] == answer.broker_url
    assert body["httpUrlTls"] == answer.http_url


def test_a_missing_topic_is_answered_only_where_first_use_would_create_it(secure_broker):
    namespace = "lookup-missing/ns"
    secure_broker.grant("watcher", ["consume"], namespace)
    secure_broker.grant("writer", ["produce"], namespace)
    missing = unique("missing")
    full_name = f"persistent://{namespace}/{missing}"
    with (
        secure_broker.client("watcher") as watcher,
        pytest.raises(stableline.TopicNotFound, match="may not create it"),
    ):
        watcher.lookup_topic(full_name)
    status, body = secure_broker.http("GET", lookup_path(namespace, missing), "watcher")
    assert status == 404 and "does not exist" in body["reason"]
    with secure_broker.client("writer") as writer:
        assert writer.lookup_topic(full_name).topic == full_name
    status, _ = secure_broker.http("GET", lookup_path(namespace, missing), "writer")
    assert status == 200
    # Looking up created nothing.
    status, listed = secure_broker.http("GET", f"/admin/v2/persistent/{namespace}")
    assert status == 404 or full_name not in listed


def test_the_cli_looks_up_over_tls_with_a_token(secure_broker):
    topic = make_topic(secure_broker, "public/default", "cli")
    command = [sys.executable, "-m", "stableline", "admin", "topics", "lookup", topic]
    options = ["--admin-url", secure_broker.process.http_url]
    options += ["--tls-trust-certs-file", str(secure_broker.security_dir / "ca.pem")]
    env = {**os.environ, "STABLELINE_TOKEN": secure_broker.token(SUPERUSER)}
    result = subprocess.run(
        [*command, *options], capture_output=True, text=True, timeout=60, env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"stableline+ssl://127.0.0.1:{secure_broker.process.grpc_port}",
        f"https://127.0.0.1:{secure_broker.process.http_port}",
    ]
    env["STABLELINE_TOKEN"] = secure_broker.token("stranger")
    refused = subprocess.run(
        [*command, *options], capture_output=True, text=True, timeout=60, env=env
    )
    assert refused.returncode == 1 and "403" in refused.stderr
