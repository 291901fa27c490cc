"""Subscriptions: cursors to consumers, isolation levels, permits, acks, redelivery."""

import importlib

# Loaded at once: light, and key_hash is also its module's name, which a later import
# of dispatcher.key_hash would otherwise leave here in the function's place.
from dispatcher.key_hash import HASH_RANGE_SIZE, key_hash, sticky_hash
from dispatcher.kinds import IsolationLevel, SubscriptionType

# The other public names' modules, loaded on first use (PEP 562): a caller that needs
# only IsolationLevel (the client SDK) does not load the engine below it.
_HOMES = {
    "Consumer": "dispatcher.consumer",
    "ControlEvent": "dispatcher.consumer",
    "Delivery": "dispatcher.consumer",
    "DrainingHash": "dispatcher.draining",
    "ConsumerAssignError": "dispatcher.errors",
    "DispatcherError": "dispatcher.errors",
    "InvalidAckError": "dispatcher.errors",
    "IsolationLevelMismatchError": "dispatcher.errors",
    "SubscriptionBusyError": "dispatcher.errors",
    "SubscriptionClosedError": "dispatcher.errors",
    "TooManyConsumersError": "dispatcher.errors",
    "TransactionConflictError": "dispatcher.errors",
    "HashRange": "dispatcher.key_shared",
    "KeySharedMode": "dispatcher.key_shared",
    "KeySharedPolicy": "dispatcher.key_shared",
    "DispatchLimits": "dispatcher.limits",
    "CommittedReadView": "dispatcher.read_view",
    "LogReadView": "dispatcher.read_view",
    "ReadView": "dispatcher.read_view",
    "Subscription": "dispatcher.subscription",
}


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'dispatcher' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next lookup is a plain global
    return value


__all__ = [
    "HASH_RANGE_SIZE",
    "CommittedReadView",
    "Consumer",
    "ConsumerAssignError",
    "ControlEvent",
    "Delivery",
    "DispatchLimits",
    "DispatcherError",
    "DrainingHash",
    "HashRange",
    "InvalidAckError",
    "IsolationLevel",
    "IsolationLevelMismatchError",
    "KeySharedMode",
    "KeySharedPolicy",
    "LogReadView",
    "ReadView",
    "Subscription",
    "SubscriptionBusyError",
    "SubscriptionClosedError",
    "SubscriptionType",
    "TooManyConsumersError",
    "TransactionConflictError",
    "key_hash",
    "sticky_hash",
]


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
