"""The Kafka face: Kafka clients produce and fetch on the broker's topics through a Kafka port of its own.

protocol (the wire: primitive types, request/response schemas, record batches)
<- coordinator (groups, offsets, transactional producers) <- server (the asyncio
listener, per-connection authentication, dispatch, the APIs by group). The broker
starts it through stableline.broker.app.kafka.
"""
