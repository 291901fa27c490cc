"""What an admin call to another broker (a partition's owner) raises when that broker
does not answer it.

A call about a partitioned topic needs each partition's stats, and its deletion,
from the broker that owns it (partitions.py asks through the PeerClient,
peers.py). The owner's refusal comes back as the same error the owner raised:
TopicNotFoundError for a topic it does not have, and for anything else
PeerCallError (gRPC UNAVAILABLE, code TopicUnavailable: retry), naming the owner
and what it said.
"""

from __future__ import annotations

from stableline.broker.errors import BrokerError


class PeerCallError(BrokerError):
    """Another broker did not answer a call made for one of its topics; retry later."""

    code = "TopicUnavailable"
