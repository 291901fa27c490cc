"""The Kafka port: the listener, each connection's authentication, request dispatch and the APIs by group."""
