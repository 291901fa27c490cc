"""Topics: the registry that loads and unloads them, a topic and its subscriptions, partitioned topics, namespace policies, the write gate."""
