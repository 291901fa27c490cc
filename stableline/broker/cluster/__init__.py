"""The cluster: membership, topic ownership, lookup, calls to peer brokers, and the metadata the brokers share."""
