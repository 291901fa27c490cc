"""Errors a subscription raises; the broker maps each to a gRPC status."""


class DispatcherError(Exception):
    """Base class of subscription errors."""


class SubscriptionBusyError(DispatcherError):
    """An Exclusive subscription already has a consumer."""


class IsolationLevelMismatchError(DispatcherError):
    """A consumer asked for another isolation level than the subscription's."""


class InvalidAckError(DispatcherError):
    """An acknowledgement names a message that does not exist or is not allowed."""


class TransactionConflictError(InvalidAckError):
    """A transactional ack names a message that is already acknowledged, or already
    acknowledged in an open transaction (another, or the same one): committing it
    could commit the application's output for that message twice."""


class SubscriptionClosedError(DispatcherError):
    """The subscription was unsubscribed or its topic closed."""


class TooManyConsumersError(DispatcherError):
    """The subscription has max_consumers_per_subscription consumers already."""


class ConsumerAssignError(DispatcherError):
    """A Key_Shared consumer cannot be given hashes: its STICKY ranges overlap another
    consumer's, or its Key_Shared mode differs from the subscription's consumers'."""
