"""Kafka's coordinators on the broker: consumer groups and their offsets, transactional and idempotent producers."""
