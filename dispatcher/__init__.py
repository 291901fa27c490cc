"""Subscriptions: cursors to consumers, isolation levels, permits, acks, redelivery."""

from dispatcher.consumer import Consumer, ControlEvent, Delivery
from dispatcher.errors import (
    DispatcherError,
    InvalidAckError,
    IsolationLevelMismatchError,
    SubscriptionBusyError,
    SubscriptionClosedError,
    TooManyConsumersError,
)
from dispatcher.kinds import IsolationLevel, SubscriptionType
from dispatcher.limits import DispatchLimits
from dispatcher.read_view import CommittedReadView, LogReadView, ReadView
from dispatcher.subscription import Subscription

__all__ = [
    "CommittedReadView",
    "Consumer",
    "ControlEvent",
    "Delivery",
    "DispatchLimits",
    "DispatcherError",
    "InvalidAckError",
    "IsolationLevel",
    "IsolationLevelMismatchError",
    "LogReadView",
    "ReadView",
    "Subscription",
    "SubscriptionBusyError",
    "SubscriptionClosedError",
    "SubscriptionType",
    "TooManyConsumersError",
]
