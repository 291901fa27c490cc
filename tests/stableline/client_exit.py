"""A blocking client's life from start to exit, for test_sync: opens producers and
consumers on several topics (each a gRPC stream with tasks of its own), sends,
receives, acknowledges, and leaves the `with` block. argv: the service URL and a
name for its topics."""

import sys

import stableline

with stableline.Client(sys.argv[1]) as client:
    for n in range(4):
        producer = client.create_producer(f"{sys.argv[2]}-{n}")
        producer.send_async(b"x", None)
        producer.flush()
        consumer = client.subscribe(
            f"{sys.argv[2]}-{n}", "sub", initial_position=stableline.InitialPosition.Earliest
        )
        consumer.acknowledge(consumer.receive(5000))
