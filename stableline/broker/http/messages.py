"""Reading one message id or one entry on Pulsar's paths:

    GET /admin/v2/persistent/{tenant}/{namespace}/{topic}/lastMessageId
    GET .../{topic}/subscription/{sub}/position/{n}[?isolationLevel=...]
    GET .../{topic}/examinemessage?initialPosition=earliest|latest&messagePosition=n

lastMessageId is Pulsar's MessageId document ({"ledgerId", "entryId",
"partitionIndex": -1}) of the topic's last confirmed entry, with the stable
position beside it: what READ_COMMITTED readers can reach. An empty topic answers
entryId -1.

position/{n} is Pulsar's "peek nth message": the n-th entry (1 = the next) the
subscription has not acknowledged after its mark-delete, read at its isolation
level (or the one asked for), as peek reads. n counts entries, as Pulsar's does
(a batch is one entry). The answer is JSON: the entry's id, producer, sequence
id, transaction and its messages as peek shows them; the X-Pulsar-Message-ID,
-publish-time, -producer-name, -sequence-id and -num-batch-message headers carry
what Pulsar's headers carry. A position past what the subscription may read
answers 404, as does one not found in the first MAX_POSITION_SCAN_ENTRIES entries
(a request's work is bounded; the reason says so); n outside
1..MAX_PEEK_SCAN_ENTRIES answers 400.

examinemessage is Pulsar's "examine message": the n-th entry of the topic's log
counted from its oldest retained entry (earliest, 1 = the oldest) or from its
last (latest, the default, 1 = the last), whoever acknowledged it and whatever
it is: as in Pulsar, transaction markers count and are shown ("marker": true).
Same document and headers as position/{n}; 404 past either end.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from dispatcher import IsolationLevel, Subscription
from managed_ledger import Entry, ManagedLedger, Position
from stableline.broker.http.paths import topic_name
from stableline.broker.topics.peek import (
    MAX_PEEK_MESSAGES,
    MAX_PEEK_SCAN_ENTRIES,
    PEEK_READ_BYTES,
    PEEK_READ_ENTRIES,
    messages_of_entry,
    parse_isolation_level,
)
from stableline.broker.topics.registry import TopicRegistry
from stableline.broker.topics.topic import Topic

# Pulsar's partitionIndex of a topic that is not a partition.
NOT_A_PARTITION = -1
# Entries looked at for position/{n}, shown or not: bounds the work of one request.
MAX_POSITION_SCAN_ENTRIES = 2 * MAX_PEEK_SCAN_ENTRIES


def _reason(status: int, reason: str) -> web.Response:
    return web.json_response({"reason": reason}, status=status)


def last_message_id(topic: Topic) -> dict[str, Any]:
    last = topic.ledger.last_confirmed
    return {
        "ledgerId": last.ledger_id,
        "entryId": last.entry_id,
        "partitionIndex": NOT_A_PARTITION,
        "stablePosition": str(topic.buffer.stable_position),
    }


def nth_log_position(ledger: ManagedLedger, n: int, from_latest: bool) -> Position | None:
    """The n-th entry (1-based) of the log up to the LAC, from its oldest retained
    entry or from its last; None when the log holds fewer. Arithmetic over the
    ledgers' entry counts: nothing is read."""
    assert n >= 1, n
    last = ledger.last_confirmed
    counts = [
        (
            info.ledger_id,
            min(info.entries, last.entry_id + 1)
            if info.ledger_id == last.ledger_id
            else info.entries,
        )
        for info in ledger.ledger_infos()
        if info.ledger_id <= last.ledger_id
    ]
    remaining = n
    for ledger_id, count in reversed(counts) if from_latest else counts:
        if remaining <= count:
            return Position(ledger_id, count - remaining if from_latest else remaining - 1)
        remaining -= count
    return None


def nth_unacked_entry(
    topic: Topic, subscription: Subscription, level: IsolationLevel, n: int
) -> tuple[Entry | None, int]:
    """The n-th entry (1-based) after the mark-delete that the subscription has not
    acknowledged and that `level` delivers, or None when there are fewer; and how
    many entries were looked at. At most MAX_POSITION_SCAN_ENTRIES are: the answer
    is read on the event loop, and acknowledged or aborted entries can lie between."""
    assert 1 <= n <= MAX_PEEK_SCAN_ENTRIES, n
    view = topic.read_view(level)
    bound = view.bound()
    cursor = subscription.cursor
    position = cursor.mark_delete.next_in_ledger()
    found = scanned = 0
    while scanned < MAX_POSITION_SCAN_ENTRIES:
        wanted = min(PEEK_READ_ENTRIES, MAX_POSITION_SCAN_ENTRIES - scanned)
        entries = topic.ledger.read(position, wanted, bound, PEEK_READ_BYTES)
        if not entries:
            break
        for entry in entries:
            scanned += 1
            if not cursor.is_acked(entry.position) and not view.should_skip(entry):
                found += 1
                if found == n:
                    return entry, scanned
        position = entries[-1].position.next_in_ledger()
    return None, scanned


async def entry_document(topic: Topic, entry: Entry, n: int) -> dict[str, Any]:
    """The entry and its first MAX_PEEK_MESSAGES messages (decoded off the event loop;
    `messagesTruncated` says when the entry holds more)."""
    header = entry.header
    messages = (
        []
        if header.is_marker
        else await messages_of_entry(entry, topic.buffer, MAX_PEEK_MESSAGES + 1)
    )
    return {
        "messageId": str(entry.position),
        "position": n,
        "publishTime": header.publish_time_ms,
        "producerName": header.producer_name or None,
        "sequenceId": header.sequence_id,
        "numMessages": header.num_messages,
        "txnId": str(header.txn_id) if header.txn_id is not None else None,
        "marker": header.is_marker,
        "messages": messages[:MAX_PEEK_MESSAGES],
        "messagesTruncated": len(messages) > MAX_PEEK_MESSAGES,
    }


def _pulsar_headers(entry: Entry) -> dict[str, str]:
    header = entry.header
    headers = {
        "X-Pulsar-Message-ID": str(entry.position),
        "X-Pulsar-publish-time": str(header.publish_time_ms),
        "X-Pulsar-sequence-id": str(header.sequence_id),
        "X-Pulsar-num-batch-message": str(header.num_messages),
    }
    if header.producer_name:
        headers["X-Pulsar-producer-name"] = header.producer_name
    if header.txn_id is not None:
        headers["X-Pulsar-txnid-most-bits"] = str(header.txn_id.most_bits)
        headers["X-Pulsar-txnid-least-bits"] = str(header.txn_id.least_bits)
    return headers


def add_routes(app: web.Application, registry: TopicRegistry) -> None:
    async def topic_of(request: web.Request) -> Topic:
        return await registry.get(topic_name(request), create=False)

    async def last_id(request: web.Request) -> web.Response:
        # It tells the stable position: the recovered one (TopicRegistry.get_stable).
        return web.json_response(last_message_id(await registry.get_stable(topic_name(request))))

    async def nth_message(request: web.Request) -> web.Response:
        topic = await topic_of(request)
        name = request.match_info["subscription"]
        subscription = topic.subscriptions.get(name)
        if subscription is None:
            return _reason(404, f"subscription {name!r} does not exist on {topic.name}")
        text = request.match_info["n"]
        if not (text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_PEEK_SCAN_ENTRIES):
            return _reason(
                400,
                f"the position must be a number from 1 (the next entry) to "
                f"{MAX_PEEK_SCAN_ENTRIES}, got {text!r}",
            )
        try:
            level = parse_isolation_level(
                request.query.get("isolationLevel"), subscription.isolation_level
            )
        except ValueError as error:
            return _reason(400, str(error))
        n = int(text)
        entry, scanned = nth_unacked_entry(topic, subscription, level, n)
        if entry is None and scanned >= MAX_POSITION_SCAN_ENTRIES:
            return _reason(
                404,
                f"no entry {n} found in the first {scanned} entries after the mark-delete of "
                f"{name!r} on {topic.name} (the most one request looks at): skip or reset "
                "the subscription, or examine the topic's log with examinemessage",
            )
        if entry is None:
            return _reason(
                404,
                f"subscription {name!r} on {topic.name} has fewer than {n} unacknowledged "
                f"entries it may read at {level.value}",
            )
        return web.json_response(
            await entry_document(topic, entry, n), headers=_pulsar_headers(entry)
        )

    async def examine(request: web.Request) -> web.Response:
        topic = await topic_of(request)
        start = request.query.get("initialPosition", "latest").strip().lower()
        if start not in ("earliest", "latest"):
            return _reason(400, f"initialPosition must be earliest or latest, got {start!r}")
        text = request.query.get("messagePosition", "1")
        if not (text.isascii() and text.isdigit() and int(text) >= 1):
            return _reason(400, f"messagePosition must be a whole number from 1, got {text!r}")
        n = int(text)
        position = nth_log_position(topic.ledger, n, from_latest=start == "latest")
        entries = topic.ledger.read(position, 1) if position is not None else []
        if not entries:
            return _reason(
                404, f"{topic.name} holds fewer than {n} entries counted from the {start}"
            )
        [entry] = entries
        return web.json_response(
            await entry_document(topic, entry, n), headers=_pulsar_headers(entry)
        )

    topic_path = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
    app.router.add_get(topic_path + "/lastMessageId", last_id)
    app.router.add_get(topic_path + "/examinemessage", examine)
    app.router.add_get(topic_path + "/subscription/{subscription}/position/{n}", nth_message)
