"""Grants in a cluster with security on: two real brokers with token authentication and
authorization on one real etcd. A grant made through one broker is enforced by the
other, and a revocation through the other is enforced by the first. (Plaintext:
brokers do not call each other here, which they cannot yet do with security on.)"""

from __future__ import annotations

import itertools
import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

import stableline
from stableline import AuthenticationToken
from stableline.broker.security.tokens import create_secret_key, create_token
from stableline.testing import BrokerProcess
from tests.conftest import wait_until
from tests.metadata.conftest import ONE_COPY_ENV, SHORT_SESSION_TIMEOUT_S, EtcdServer

SUPERUSER = "admin"
_names = itertools.count()


class SecureCluster:
    def __init__(self, brokers: list[BrokerProcess], secret: bytes):
        self.brokers = brokers
        self.secret = secret

    def token(self, role: str) -> str:
        return create_token(role, secret_key=self.secret)

    def http(self, broker: BrokerProcess, method: str, path: str, body: object = None):
        data = json.dumps(body).encode() if body is not None else None
        headers = {
            "Authorization": f"Bearer {self.token(SUPERUSER)}",
            "X-Stableline-Request": "test",
        }
        request = urllib.request.Request(broker.http_url + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        return status, json.loads(raw) if raw else None

    def client(self, broker: BrokerProcess, role: str) -> stableline.Client:
        return stableline.Client(
            broker.service_url, authentication=AuthenticationToken(self.token(role))
        )


@pytest.fixture(scope="module")
def secure_cluster(
    cluster_etcd: EtcdServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecureCluster]:
    root = tmp_path_factory.mktemp("secure-cluster")
    secret = create_secret_key()
    (root / "secret.key").write_bytes(secret)
    name = f"secure{os.getpid()}-{next(_names)}"
    brokers = [
        BrokerProcess(
            root / f"broker-{i}",
            extra_args=[
                "--metadata-store",
                cluster_etcd.url,
                "--cluster",
                name,
                "--auth-token-secret-key",
                str(root / "secret.key"),
                "--superuser-roles",
                SUPERUSER,
            ],
            env={
                "STABLELINE_METADATA_SESSION_TIMEOUT_S": str(SHORT_SESSION_TIMEOUT_S),
                **ONE_COPY_ENV,  # two brokers: one copy of each topic
            },
        )
        for i in range(2)
    ]
    try:
        for broker in brokers:
            broker.start()
        yield SecureCluster(brokers, secret)
    finally:
        for broker in brokers:
            broker.stop()


@pytest.mark.slow
def test_a_grant_through_one_broker_is_enforced_on_the_other_and_so_is_its_revocation(
    secure_cluster,
):
    first, second = secure_cluster.brokers
    namespace = f"granted{os.getpid()}-{next(_names)}/ns"
    topic = f"persistent://{namespace}/orders"
    permissions = f"/admin/v2/namespaces/{namespace}/permissions"
    alice_on_second = secure_cluster.client(second, "alice")
    try:
        with pytest.raises(stableline.AuthorizationError):
            alice_on_second.create_producer(topic)
        status, body = secure_cluster.http(first, "POST", f"{permissions}/alice", ["produce"])
        assert status == 204, body
        wait_until(
            lambda: secure_cluster.http(second, "GET", permissions)[1] == {"alice": ["produce"]},
            message="the second broker to see the grant",
        )
        alice_on_second.create_producer(topic).send(b"allowed by a grant made elsewhere")
    finally:
        alice_on_second.close()
    status, body = secure_cluster.http(second, "DELETE", f"{permissions}/alice")
    assert status == 204, body
    wait_until(
        lambda: secure_cluster.http(first, "GET", permissions)[1] == {},
        message="the first broker to see the revocation",
    )
    alice_on_first = secure_cluster.client(first, "alice")
    try:
        with pytest.raises(stableline.AuthorizationError):
            alice_on_first.create_producer(topic)
    finally:
        alice_on_first.close()
