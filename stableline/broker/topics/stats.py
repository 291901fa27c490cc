"""The stats documents of a topic and its subscriptions, in Pulsar's field names
(HTTP and gRPC admin)."""

from __future__ import annotations

from typing import Any

from dispatcher import Subscription, SubscriptionType
from managed_ledger.replication import Replication
from stableline.broker.topics.persistence import SINGLE_COPY
from stableline.broker.topics.placement import Placement
from stableline.broker.topics.topic import Topic


def _subscription_stats(subscription: Subscription) -> dict[str, Any]:
    consumers = [
        {
            "consumerName": consumer.name,
            "availablePermits": consumer.permits,
            "unackedMessages": consumer.unacked_messages,
            "blockedConsumerOnUnackedMsgs": consumer.blocked,
            "msgOutCounter": consumer.messages_out,
            "bytesOutCounter": consumer.bytes_out,
            "priorityLevel": consumer.priority_level,
            "connectedSince": consumer.connected_since_ms,
        }
        for consumer in subscription.consumers
    ]
    active = subscription.active_consumer
    stats = {
        "type": subscription.type.value,
        "subscriptionIsolationLevel": subscription.isolation_level.value,
        "msgBacklog": subscription.backlog,
        "msgOutCounter": subscription.messages_out,
        "bytesOutCounter": subscription.bytes_out,
        "unackedMessages": subscription.unacked_messages,
        "blockedSubscriptionOnUnackedMsgs": subscription.blocked,
        "markDeletePosition": str(subscription.cursor.mark_delete),
        "readPosition": str(subscription.cursor.read_position),
        "activeConsumerName": active.name if active is not None else None,
        "isDurable": True,
        "consumers": consumers,
    }
    if subscription.type is SubscriptionType.KEY_SHARED:
        _add_key_shared_stats(subscription, stats)
    return stats


def _add_key_shared_stats(subscription: Subscription, stats: dict[str, Any]) -> None:
    """Pulsar 4's Key_Shared fields: the mode, the hashes draining (PIP-379) and each
    consumer's hash ranges."""
    mode = subscription.key_shared_mode
    draining = subscription.draining_hashes()
    stats["keySharedMode"] = mode.value if mode is not None else None
    stats["allowOutOfOrderDelivery"] = False
    stats["drainingHashesCount"] = len(draining)
    stats["drainingHashesUnackedMessages"] = sum(d.messages for d in draining)
    stats["lookAheadEntries"] = subscription.looked_ahead_entries
    ranges = subscription.hash_ranges()
    for consumer, consumer_stats in zip(subscription.consumers, stats["consumers"], strict=True):
        owned = ranges.get(consumer, [])
        mine = [d for d in draining if d.consumer is consumer]
        consumer_stats["keyHashRanges"] = [str(r) for r in owned]
        consumer_stats["keyHashRangeArrays"] = [[r.start, r.end] for r in owned]
        consumer_stats["drainingHashesCount"] = len(mine)
        consumer_stats["drainingHashesUnackedMessages"] = sum(d.messages for d in mine)


def persistence_stats(
    placement: Placement | None, replication: Replication | None = None
) -> dict[str, Any]:
    """A topic's copies: its policy's E, Qw, Qa and, in a cluster, the brokers of its
    ensemble (leader first): as its writer has them now, when it is written here (a
    lost member may have been replaced since the topic was opened); standalone (no
    placement) the one copy here."""
    policy = SINGLE_COPY if placement is None else placement.persistence
    stats: dict[str, Any] = {
        "ensemble": policy.ensemble_size,
        "writeQuorum": policy.write_quorum,
        "ackQuorum": policy.ack_quorum,
    }
    if placement is not None:
        replicas = None if replication is None else replication.describe().get("replicas")
        stats["ensembleBrokers"] = (
            [placement.leader, *replicas] if replicas is not None else list(placement.ensemble)
        )
    return stats


def topic_stats(topic: Topic, placement: Placement | None = None) -> dict[str, Any]:
    """Pulsar's TopicStats, with `persistence` from the topic's placement (None:
    standalone, one copy)."""
    topic.rate_in.roll()
    rate = topic.rate_in
    ledger = topic.ledger
    subscriptions = {
        name: _subscription_stats(s) for name, s in sorted(topic.subscriptions.items())
    }
    messages_out = sum(s["msgOutCounter"] for s in subscriptions.values())
    bytes_out = sum(s["bytesOutCounter"] for s in subscriptions.values())
    topic.rate_out.sample(messages_out, bytes_out)
    return {
        "topic": str(topic.name),
        "msgRateIn": round(rate.message_rate, 3),
        "msgThroughputIn": round(rate.byte_rate, 3),
        "msgRateOut": round(topic.rate_out.message_rate, 3),
        "msgThroughputOut": round(topic.rate_out.byte_rate, 3),
        "msgInCounter": rate.messages,
        "bytesInCounter": rate.bytes,
        "msgOutCounter": messages_out,
        "bytesOutCounter": bytes_out,
        "averageMsgSize": round(rate.bytes / rate.messages, 3) if rate.messages else 0.0,
        "storageSize": ledger.total_size,
        # Entries whose stored bytes fail their checks: skipped by every reader.
        "corruptEntries": ledger.corrupt_entries,
        "lastConfirmedEntry": str(ledger.last_confirmed),
        "transactionBuffer": topic.buffer.stats(),
        "persistence": persistence_stats(placement, ledger.replication),
        # A replicated topic's copies as its writer sees them (absent with one copy).
        **(
            {"replication": ledger.replication.describe()} if ledger.replication is not None else {}
        ),
        "publishers": [
            {
                "producerName": publisher.name,
                "pendingPublishes": publisher.pending_publishes,
                "maxPendingPublishes": publisher.max_pending_publishes,
            }
            for publisher in sorted(topic.producers.values(), key=lambda p: p.name)
        ],
        "subscriptions": subscriptions,
    }


def internal_stats(topic: Topic) -> dict[str, Any]:
    ledger = topic.ledger
    infos = ledger.ledger_infos()
    # A topic has no ledger until its first append creates one.
    current = infos[-1] if infos else None
    return {
        "entriesAddedCounter": ledger.entries_added,
        "numberOfEntries": ledger.total_entries,
        "totalSize": ledger.total_size,
        "currentLedgerEntries": current.entries if current else 0,
        "currentLedgerSize": current.size if current else 0,
        "lastLedgerCreatedTimestamp": current.created_ms if current else None,
        "lastConfirmedEntry": str(ledger.last_confirmed),
        "state": ledger.state.value,
        "cacheSize": ledger.cache.size_bytes,
        "ledgers": [
            {"ledgerId": i.ledger_id, "entries": i.entries, "size": i.size, "closed": i.closed}
            for i in infos
        ],
        "cursors": {
            name: {
                "markDeletePosition": str(cursor.mark_delete),
                "readPosition": str(cursor.read_position),
                "individuallyDeletedMessages": len(cursor.individually_acked),
                "properties": dict(cursor.properties),
            }
            for name, cursor in sorted(ledger.cursors.items())
        },
    }
