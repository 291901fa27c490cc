"""The limits a subscription enforces: unacknowledged messages and consumers.

Pulsar's blockedConsumerOnUnackedMsgs: a consumer holding max_unacked_per_consumer
messages delivered and not acknowledged gets nothing more, and a subscription whose
consumers together hold max_unacked_per_subscription gets nothing more, until acks
(or redeliveries) bring the count down to half the limit. Half, not one below, so
a consumer acking one message at a time does not flip the dispatcher on and off
for every ack. An entry is counted whole (all its messages) until it is fully
acknowledged; one entry may take a consumer past its limit, as in Pulsar.

Key_Shared reads past entries it cannot deliver yet (their hash is draining, or its
owner has no permits) so that other keys go on; at most max_key_shared_look_ahead
such entries are kept aside per subscription (Pulsar's look-ahead limit), then
reading stops until some of them are delivered.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DispatchLimits:
    max_unacked_per_consumer: int = 50_000
    max_unacked_per_subscription: int = 200_000
    max_consumers: int = 1000
    max_key_shared_look_ahead: int = 2000

    def __post_init__(self) -> None:
        for name in (
            "max_unacked_per_consumer",
            "max_unacked_per_subscription",
            "max_consumers",
            "max_key_shared_look_ahead",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
