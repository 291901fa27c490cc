"""The broker, in layers; each package imports only the ones above it in this list.

    config, failpoints    what every layer reads (no layer)
    topics                the registry, a topic and its subscriptions, partitioned
                          topics, namespace policies, the write gate
    security              tokens, roles and permissions, TLS settings
    cluster               membership, ownership, lookup, calls to peer brokers
    txn                   the coordinator shards, ending transactions, txn acks
    observability         metrics, why READ_COMMITTED readers wait
    connections           connection slots and accept loops for the ports
    grpc, http, kafka     the faces: each turns its wire into calls on the core
    app                   builds and wires everything, starts the faces, stops

tests/test_layers.py holds these rules; docs/design/packages.md explains them.
"""
