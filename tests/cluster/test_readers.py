"""Readers on a real three-broker cluster: a reader opened from `earliest` asks the
broker nothing until its first Fetch, which a broker that does not own the topic
refuses; the reader then reads on the owner."""

from __future__ import annotations

import stableline

from .conftest import Cluster


def test_a_new_client_s_reader_reads_a_topic_another_broker_owns(cluster: Cluster):
    first = cluster.brokers[0]
    with stableline.Client(first.service_url) as writer:
        topic = next(
            t
            for t in (f"persistent://public/default/read-elsewhere-{i}" for i in range(30))
            if writer.lookup_topic(t).grpc_address != f"127.0.0.1:{first.grpc_port}"
        )
        writer.create_producer(topic).send(b"on its owner")
    # A client of its own: nothing cached of the topic's owner.
    with stableline.Client(first.service_url) as client:
        reader = client.create_reader(topic, stableline.MessageId.earliest)
        assert reader.read_next(5000).data() == b"on its owner"
        assert not reader.has_message_available()
