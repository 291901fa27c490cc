"""Kafka's wire: primitive types, request and response schemas by API and version, record batches v2, compression."""
