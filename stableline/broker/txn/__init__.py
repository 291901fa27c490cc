"""Transactions on the broker: the coordinator shards, ending a transaction in its topics, transactional acks."""
