"""Peeking at a subscription's next messages at either isolation level, without moving
its cursor or delivering anything.

A peek starts after the cursor's mark-delete position, leaves out the entries the
subscription has acknowledged, and reads up to the bound of the level asked for:
the stable position for READ_COMMITTED (aborted transactions left out, as the
dispatcher leaves them out), the LAC for READ_UNCOMMITTED (everything but markers).
Each message says which transaction wrote it, that transaction's state here, and
whether READ_COMMITTED may see it yet: peeking at both levels shows what a
stalled READ_COMMITTED subscription is waiting for.

A batch is decoded message by message and only as far as the messages asked for,
in a worker thread: one entry of millions of messages costs what its first
messages cost, and the event loop (health checks, producers) never waits on it.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from dispatcher import IsolationLevel, Subscription
from managed_ledger import Entry
from stableline.broker.topics.topic import Topic
from stableline.wire import BatchMessage, batch_messages
from txnbuffer import BufferState, TransactionBuffer

MAX_PEEK_MESSAGES = 100
DEFAULT_PEEK_MESSAGES = 10
# Entries looked at in one peek, shown or not (acked, markers, aborted): bounds the work.
MAX_PEEK_SCAN_ENTRIES = 10_000
PEEK_READ_ENTRIES = 100
# Bytes of entries read at once while peeking (at least one entry): what one step
# of a peek holds in memory, whatever the entries' sizes.
PEEK_READ_BYTES = 8 * 1024 * 1024
PAYLOAD_PREVIEW_BYTES = 2048


def parse_isolation_level(text: str | None, default: IsolationLevel) -> IsolationLevel:
    if not text:
        return default
    try:
        return IsolationLevel(text.strip().upper())
    except ValueError:
        names = " or ".join(level.value for level in IsolationLevel)
        raise ValueError(f"isolationLevel must be {names}, got {text!r}") from None


def parse_count(text: str | None) -> int:
    if text is None or text == "":
        return DEFAULT_PEEK_MESSAGES
    if not text.isdigit() or not 1 <= int(text) <= MAX_PEEK_MESSAGES:
        raise ValueError(f"count must be a number from 1 to {MAX_PEEK_MESSAGES}, got {text!r}")
    return int(text)


def _txn_state(buffer: TransactionBuffer, entry: Entry) -> str | None:
    txn_id = entry.header.txn_id
    if txn_id is None:
        return None
    if buffer.is_aborted_entry(entry):
        return "ABORTED"
    if txn_id in buffer.ongoing:
        return "OPEN"
    if buffer.state is not BufferState.READY:
        return "UNKNOWN"  # not replayed yet: recovery will tell
    return "COMMITTED"


def _payload(data: bytes) -> dict[str, Any]:
    preview = data[:PAYLOAD_PREVIEW_BYTES]
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(preview).decode("ascii"), "base64"
    else:
        # A cut may split a character: drop the partial one, not the whole preview.
        text, encoding = preview.decode("utf-8", errors="ignore"), "text"
    return {
        "payload": text,
        "payloadEncoding": encoding,
        "payloadTruncated": len(data) > PAYLOAD_PREVIEW_BYTES,
        "size": len(data),
    }


def entry_facts(entry: Entry, buffer: TransactionBuffer) -> dict[str, Any]:
    """What every message of the entry shows of it (read on the event loop: the
    transaction buffer is the loop's)."""
    header = entry.header
    txn_id = header.txn_id
    return {
        "publishTime": header.publish_time_ms,
        "producerName": header.producer_name or None,
        "txnId": str(txn_id) if txn_id is not None else None,
        "txnState": _txn_state(buffer, entry),
        "visibleToReadCommitted": entry.position <= buffer.stable_position
        and not buffer.is_aborted_entry(entry),
    }


def decode_messages(
    entries: list[tuple[Entry, dict[str, Any]]], limit: int
) -> list[dict[str, Any]]:
    """The first `limit` messages of the entries, each with its entry's facts. Touches
    only the entries' bytes, so it runs in a worker thread; a batch is decoded only
    as far as `limit` reaches."""
    messages: list[dict[str, Any]] = []
    for entry, facts in entries:
        wanted = limit - len(messages)
        if wanted <= 0:
            break
        try:
            batch = batch_messages(entry.payload, wanted)
        except ValueError:
            batch = [BatchMessage(entry.payload, None, {}, 0)]
        position = entry.position
        messages.extend(
            {
                "messageId": f"{position}:{index}",
                **facts,
                "eventTime": message.event_time_ms or None,
                "key": message.partition_key,
                "properties": message.properties,
                **_payload(message.payload),
            }
            for index, message in enumerate(batch)
        )
    return messages


async def messages_of_entry(
    entry: Entry, buffer: TransactionBuffer, limit: int = MAX_PEEK_MESSAGES
) -> list[dict[str, Any]]:
    """The entry's first `limit` messages, decoded off the event loop."""
    facts = entry_facts(entry, buffer)
    return await asyncio.to_thread(decode_messages, [(entry, facts)], limit)


async def peek(
    topic: Topic, subscription: Subscription, level: IsolationLevel, count: int
) -> dict[str, Any]:
    """The next `count` messages the subscription would get at `level`, in log order.

    Entries are read on the event loop in byte-bounded steps; their messages are
    decoded in a worker thread, only as many as `count` needs (an entry holds at
    least one message, so at most `count` entries are decoded per step)."""
    assert 1 <= count <= MAX_PEEK_MESSAGES, count
    view = topic.read_view(level)
    bound = view.bound()
    cursor = subscription.cursor
    ledger = topic.ledger
    buffer = topic.buffer
    messages: list[dict[str, Any]] = []
    scanned = 0
    position = cursor.mark_delete.next_in_ledger()
    pending: list[tuple[Entry, dict[str, Any]]] = []
    while len(messages) < count and scanned < MAX_PEEK_SCAN_ENTRIES:
        entries = ledger.read(position, PEEK_READ_ENTRIES, bound, PEEK_READ_BYTES)
        if not entries:
            break
        for entry in entries:
            scanned += 1
            position = entry.position.next_in_ledger()
            if not cursor.is_acked(entry.position) and not view.should_skip(entry):
                pending.append((entry, entry_facts(entry, buffer)))
            if len(messages) + len(pending) >= count or scanned >= MAX_PEEK_SCAN_ENTRIES:
                break
        if len(messages) + len(pending) >= count or scanned >= MAX_PEEK_SCAN_ENTRIES:
            messages.extend(
                await asyncio.to_thread(decode_messages, pending, count - len(messages))
            )
            pending = []
    if pending:
        messages.extend(await asyncio.to_thread(decode_messages, pending, count - len(messages)))
    last_confirmed = ledger.last_confirmed
    return {
        "topic": str(topic.name),
        "subscription": subscription.name,
        "subscriptionIsolationLevel": subscription.isolation_level.value,
        "isolationLevel": level.value,
        "markDeletePosition": str(cursor.mark_delete),
        "bound": str(bound),
        "lastConfirmedEntry": str(last_confirmed),
        "entriesAfterBound": ledger.count_entries(bound, last_confirmed),
        "scannedEntries": scanned,
        "scanLimitReached": scanned >= MAX_PEEK_SCAN_ENTRIES,
        "messages": messages[:count],
    }
