"""The settings a subscription is made of: its type and its isolation level."""

from __future__ import annotations

import enum


class SubscriptionType(enum.Enum):
    EXCLUSIVE = "Exclusive"
    SHARED = "Shared"
    FAILOVER = "Failover"
    KEY_SHARED = "Key_Shared"


class IsolationLevel(enum.Enum):
    """PIP-298: what a subscription may read of a topic with transactions."""

    READ_COMMITTED = "READ_COMMITTED"
    READ_UNCOMMITTED = "READ_UNCOMMITTED"

    @classmethod
    def parse(cls, text: str | IsolationLevel) -> IsolationLevel:
        """The level a text names, any case, `-` or `_` ("read-committed"); a level
        is itself."""
        if isinstance(text, cls):
            return text
        normalized = str(text).strip().upper().replace("-", "_")
        try:
            return cls(normalized)
        except ValueError:
            choices = ", ".join(level.value for level in cls)
            raise ValueError(f"unknown isolation level {text!r}: use one of {choices}") from None
