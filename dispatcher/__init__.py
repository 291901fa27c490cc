"""Subscriptions: cursors to consumers, isolation levels, permits, acks, redelivery."""

from dispatcher.consumer import Consumer, ControlEvent, Delivery
from dispatcher.draining import DrainingHash
from dispatcher.errors import (
    ConsumerAssignError,
    DispatcherError,
    InvalidAckError,
    IsolationLevelMismatchError,
    SubscriptionBusyError,
    SubscriptionClosedError,
    TooManyConsumersError,
    TransactionConflictError,
)
from dispatcher.key_hash import HASH_RANGE_SIZE, key_hash, sticky_hash
from dispatcher.key_shared import HashRange, KeySharedMode, KeySharedPolicy
from dispatcher.kinds import IsolationLevel, SubscriptionType
from dispatcher.limits import DispatchLimits
from dispatcher.read_view import CommittedReadView, LogReadView, ReadView
from dispatcher.subscription import Subscription

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
