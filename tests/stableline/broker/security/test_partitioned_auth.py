"""Partitioned topics on a real `serve --secure` broker: the admin is a superuser's;
clients with produce or consume on the namespace use the topic (they may read its
partition count)."""

from __future__ import annotations

import pytest

import stableline
from tests.stableline.broker.security.conftest import SUPERUSER, SecureBroker

PATH = "/admin/v2/persistent/public/default/secured/partitions"


@pytest.fixture(scope="module")
def broker(secure_broker: SecureBroker) -> SecureBroker:
    return secure_broker


def test_only_a_superuser_creates_a_partitioned_topic_and_granted_roles_use_it(broker):
    broker.grant("shop", ["produce", "consume"])
    assert broker.http("PUT", PATH, role="shop", body=2)[0] == 403
    assert broker.http("PUT", PATH, role=SUPERUSER, body=2)[0] == 204
    with broker.client("shop") as shop:
        consumer = shop.subscribe(
            "secured", "s", initial_position=stableline.InitialPosition.Earliest
        )
        producer = shop.create_producer("secured")
        sent = {producer.send(b"m", partition_key=f"k{i}").partition() for i in range(20)}
        assert sent == {0, 1}
        received = [consumer.receive(timeout_millis=10_000) for _ in range(20)]
        assert {m.message_id().partition() for m in received} == {0, 1}
    with broker.client("stranger") as stranger, pytest.raises(stableline.AuthorizationError):
        stranger.create_producer("secured")
