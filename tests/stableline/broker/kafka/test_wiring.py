"""How the broker opens (or keeps closed) its Kafka port."""

from __future__ import annotations

from stableline.broker.config import BrokerConfig


def test_the_kafka_port_is_on_at_9092_by_default_and_test_brokers_keep_it_closed(broker):
    assert BrokerConfig().kafka_address == "127.0.0.1:9092"
    # BrokerProcess passes --kafka '' unless given a kafka_port: `serve --kafka ''`.
    assert "kafka_port" not in broker.wait_for_event("ready")
