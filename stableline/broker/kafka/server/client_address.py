"""The address of the Kafka client whose request is being answered.

Each connection is served by a task of its own (listener.py), which sets it once;
what runs for that connection's requests reads it (DescribeGroups shows each
member's host, as Kafka does: "/127.0.0.1").
"""

from __future__ import annotations

from contextvars import ContextVar

client_host: ContextVar[str] = ContextVar("kafka_client_host", default="")


def host_of(peer: object) -> str:
    """Kafka's form of a peer address from asyncio's peername ("/HOST")."""
    if isinstance(peer, tuple) and peer:
        return f"/{peer[0]}"
    return ""
