"""A topic: its managed ledger, its subscriptions, and its counters."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from dispatcher import (
    Consumer,
    IsolationLevel,
    LogReadView,
    ReadView,
    Subscription,
    SubscriptionType,
)
from managed_ledger import EntryHeader, ManagedLedger, Position
from stableline.topic_name import TopicName


@dataclass(slots=True)
class RateCounter:
    """Totals plus a rate over the last window, for Pulsar-style msgRateIn/Out."""

    messages: int = 0
    bytes: int = 0
    _window_start: float = field(default_factory=time.monotonic)
    _window_messages: int = 0
    _window_bytes: int = 0
    message_rate: float = 0.0
    byte_rate: float = 0.0

    def add(self, messages: int, size: int) -> None:
        self.messages += messages
        self.bytes += size
        self._window_messages += messages
        self._window_bytes += size
        self.roll()

    def roll(self, window_s: float = 1.0) -> None:
        elapsed = time.monotonic() - self._window_start
        if elapsed >= window_s:
            self.message_rate = self._window_messages / elapsed
            self.byte_rate = self._window_bytes / elapsed
            self._window_start = time.monotonic()
            self._window_messages = self._window_bytes = 0


class Topic:
    def __init__(self, name: TopicName, ledger: ManagedLedger):
        self.name = name
        self.ledger = ledger
        self.subscriptions: dict[str, Subscription] = {}
        self.producers: dict[int, str] = {}
        self.rate_in = RateCounter()
        self._log_view = LogReadView(ledger)
        ledger.add_listener(self._on_append)
        for cursor in ledger.cursors.values():
            subscription = Subscription(str(name), cursor, self._log_view)
            subscription.view = self.read_view(subscription.isolation_level)
            self.subscriptions[cursor.name] = subscription

    def read_view(self, level: IsolationLevel) -> ReadView:
        """What a reader at this isolation level may see (no transactions yet: the log)."""
        return self._log_view

    def _on_append(self) -> None:
        for subscription in self.subscriptions.values():
            subscription.wake()

    async def publish(self, header: EntryHeader, payload: bytes) -> Position:
        position = await self.ledger.append(header, payload)
        self.rate_in.add(header.num_messages, len(payload))
        return position

    def subscribe(
        self,
        subscription_name: str,
        consumer: Consumer,
        type_: SubscriptionType,
        level: IsolationLevel,
        start_at_earliest: bool,
    ) -> Subscription:
        subscription = self.subscriptions.get(subscription_name)
        if subscription is None:
            cursor, _created = self.ledger.open_cursor(
                subscription_name, start_at_earliest, Subscription.properties_for(type_, level)
            )
            subscription = Subscription(str(self.name), cursor, self.read_view(level))
            self.subscriptions[subscription_name] = subscription
        subscription.add_consumer(consumer, type_, level)
        return subscription

    async def unsubscribe(self, subscription: Subscription) -> None:
        await subscription.close()
        self.subscriptions.pop(subscription.name, None)
        self.ledger.delete_cursor(subscription.name)

    async def close(self) -> None:
        for subscription in list(self.subscriptions.values()):
            await subscription.close()
        self.ledger.remove_listener(self._on_append)
        await self.ledger.close()

    async def delete(self) -> None:
        for subscription in list(self.subscriptions.values()):
            await subscription.close()
        self.subscriptions.clear()
        await self.ledger.delete()
