"""How the broker opens (or keeps closed) its Kafka port."""

from __future__ import annotations

import pytest

from stableline.broker.config import BrokerConfig
from stableline.testing import BrokerExited, BrokerProcess


def test_the_kafka_port_is_on_at_9092_by_default_and_test_brokers_keep_it_closed(broker):
    assert BrokerConfig().kafka_address == "127.0.0.1:9092"
    # BrokerProcess passes --kafka '' unless given a kafka_port: `serve --kafka ''`.
    assert "kafka_port" not in broker.wait_for_event("ready")


def test_a_broker_with_authentication_refuses_to_open_an_unauthenticated_kafka_port(tmp_path):
    from stableline.broker.security.tokens import create_secret_key

    secret = tmp_path / "secret.key"
    secret.write_bytes(create_secret_key())
    process = BrokerProcess(
        tmp_path / "data",
        extra_args=["--auth-token-secret-key", str(secret), "--kafka", "127.0.0.1:0"],
    )
    with pytest.raises(BrokerExited) as exited:
        process.start()
    assert "Kafka port has no TLS or SASL yet" in str(exited.value)
