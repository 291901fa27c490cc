"""Subscription admin on Pulsar's paths: list, create, delete, reset, skip.

    GET    /admin/v2/persistent/{tenant}/{namespace}/{topic}/subscriptions
    PUT    .../{topic}/subscription/{sub}?isolationLevel=..&initialPosition=earliest|latest
    DELETE .../{topic}/subscription/{sub}[?force=true]
    POST   .../{topic}/subscription/{sub}/resetcursor/{timestamp_ms}
    POST   .../{topic}/subscription/{sub}/resetcursor      {"ledgerId": L, "entryId": E}
    POST   .../{topic}/subscription/{sub}/skip/{n}
    POST   .../{topic}/subscription/{sub}/skip_all

Skips count entries, as the backlog does (a batch is one entry), and as Pulsar's
skip does. A skip never passes what the subscription may read: the stable
position for READ_COMMITTED (an open transaction's entries are not skipped
before they are decided), the LAC for READ_UNCOMMITTED. A subscription's
isolation level is fixed when it is created (PIP-298): PUT takes it, default
READ_COMMITTED, and a consumer asking for the other level is refused.

A reset or skip with consumers connected keeps them connected: what they hold
unacknowledged is delivered again from the new position, and the permits they
had stay theirs.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from dispatcher import IsolationLevel, Subscription, SubscriptionType
from managed_ledger import Position
from stableline.broker.http.paths import topic_name
from stableline.broker.topics.peek import parse_isolation_level
from stableline.broker.topics.registry import TopicRegistry
from stableline.broker.topics.topic import Topic
from stableline.names import InvalidNameError, check_name

# Entries acknowledged per step of a skip; the loop serves others between steps.
SKIP_STEP_ENTRIES = 1000
# Pulsar's MessageId.latest: a ledger id past every real one.
LATEST_LEDGER_ID = 2**62


def _reason(status: int, reason: str) -> web.Response:
    return web.json_response({"reason": reason}, status=status)


def _subscription(topic: Topic, name: str) -> Subscription:
    subscription = topic.subscriptions.get(name)
    if subscription is None:
        raise web.HTTPNotFound(
            text=json.dumps({"reason": f"subscription {name!r} does not exist on {topic.name}"}),
            content_type="application/json",
        )
    return subscription


def _bad_request(reason: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(text=json.dumps({"reason": reason}), content_type="application/json")


def _seek_keeping_permits(subscription: Subscription, mark_delete: Position) -> None:
    """Move the cursor; consumers stay connected with the permits they had."""
    permits = {consumer: consumer.permits for consumer in subscription.consumers}
    subscription.seek(mark_delete)
    for consumer, count in permits.items():
        subscription.flow(consumer, count)


def _unacked_entries(subscription: Subscription, upto: Position, limit: int | None):
    """The subscription's unacknowledged entries after its mark-delete, up to `upto`."""
    cursor = subscription.cursor
    position = cursor.mark_delete
    found = 0
    while limit is None or found < limit:
        following = cursor.ledger.first_position_after(position)
        if following is None or following > upto:
            return
        position = following
        if not cursor.is_acked(position):
            found += 1
            yield position


async def _skip(topic: Topic, subscription: Subscription, count: int | None) -> int:
    """Acknowledge the next `count` unacknowledged entries (all when None); each step
    admitted by the write gate (BrokerFencedError)."""
    topic.write_gate.admit(topic.name)
    bound = subscription.view.bound()
    if count is None and not subscription.cursor.individually_acked:
        skipped = subscription.cursor.ledger.count_entries(subscription.cursor.mark_delete, bound)
        if skipped:
            _seek_keeping_permits(subscription, bound)
        return skipped
    skipped = 0
    step: list[tuple[Position, int]] = []
    for position in list(_unacked_entries(subscription, bound, count)):
        step.append((position, -1))
        if len(step) >= SKIP_STEP_ENTRIES:
            subscription.ack(step)
            skipped += len(step)
            step = []
            await asyncio.sleep(0)
            topic.write_gate.admit(topic.name)
    subscription.ack(step)
    return skipped + len(step)


def _message_id_target(topic: Topic, body: object) -> Position:
    """Pulsar's MessageId body -> the mark-delete that makes it the next one read."""
    if not isinstance(body, dict) or not all(
        isinstance(body.get(key), int) for key in ("ledgerId", "entryId")
    ):
        raise _bad_request(
            'the body must be a message id, e.g. {"ledgerId": 3, "entryId": 0}; '
            "ledgerId -1 = earliest"
        )
    ledger = topic.ledger
    ledger_id, entry_id = body["ledgerId"], body["entryId"]
    if ledger_id < 0:
        return ledger.first_position()
    if ledger_id >= LATEST_LEDGER_ID:
        return ledger.last_confirmed
    target = Position(ledger_id, entry_id - 1)
    if target >= ledger.last_confirmed:
        if Position(ledger_id, entry_id) == ledger.last_confirmed.next_in_ledger():
            return ledger.last_confirmed
        raise _bad_request(
            f"message id {ledger_id}:{entry_id} is past the last entry of {topic.name} "
            f"({ledger.last_confirmed})"
        )
    return max(target, ledger.first_position())


def add_routes(app: web.Application, registry: TopicRegistry) -> None:
    async def topic_of(request: web.Request) -> Topic:
        return await registry.get(topic_name(request), create=False)

    async def writable_topic_of(request: web.Request) -> Topic:
        """topic_of, for a call that moves a cursor: BrokerFencedError (503) while
        the broker's write gate is closed."""
        topic = await topic_of(request)
        topic.write_gate.admit(topic.name)
        return topic

    async def list_subscriptions(request: web.Request) -> web.Response:
        topic = await topic_of(request)
        return web.json_response(sorted(topic.subscriptions))

    async def create_subscription(request: web.Request) -> web.Response:
        topic = await topic_of(request)
        name = request.match_info["subscription"]
        if not name.strip():
            raise _bad_request("a subscription name cannot be empty")
        try:
            check_name("subscription", name)
        except InvalidNameError as error:
            raise _bad_request(str(error)) from None
        try:
            level = parse_isolation_level(
                request.query.get("isolationLevel"), IsolationLevel.READ_COMMITTED
            )
        except ValueError as error:
            raise _bad_request(str(error)) from None
        position = request.query.get("initialPosition", "latest").strip().lower()
        if position not in ("earliest", "latest"):
            raise _bad_request(f"initialPosition must be earliest or latest, got {position!r}")
        existing = topic.subscriptions.get(name)
        if existing is not None:
            return _reason(
                409,
                f"subscription {name!r} already exists on {topic.name} "
                f"({existing.isolation_level.value})",
            )
        topic.create_subscription(
            name, SubscriptionType.EXCLUSIVE, level, start_at_earliest=position == "earliest"
        )
        return web.Response(status=204)

    async def delete_subscription(request: web.Request) -> web.Response:
        topic = await topic_of(request)
        subscription = _subscription(topic, request.match_info["subscription"])
        force = request.query.get("force", "false").lower() == "true"
        if subscription.consumers and not force:
            return _reason(
                412,
                f"subscription {subscription.name!r} has {len(subscription.consumers)} "
                "connected consumer(s): close them, or delete with force=true to disconnect them",
            )
        await topic.unsubscribe(subscription)
        return web.Response(status=204)

    async def reset_cursor_to_time(request: web.Request) -> web.Response:
        topic = await writable_topic_of(request)
        subscription = _subscription(topic, request.match_info["subscription"])
        text = request.match_info["timestamp"]
        if not text.isdigit():
            raise _bad_request(f"the timestamp must be milliseconds since the epoch, got {text!r}")
        _seek_keeping_permits(subscription, topic.ledger.find_position_by_time(int(text)))
        return web.Response(status=204)

    async def reset_cursor_to_message(request: web.Request) -> web.Response:
        topic = await writable_topic_of(request)
        subscription = _subscription(topic, request.match_info["subscription"])
        try:
            body = json.loads(await request.read() or b"null")
        except ValueError:
            body = None
        _seek_keeping_permits(subscription, _message_id_target(topic, body))
        return web.Response(status=204)

    async def skip(request: web.Request) -> web.Response:
        topic = await topic_of(request)
        subscription = _subscription(topic, request.match_info["subscription"])
        text = request.match_info["count"]
        if not text.isdigit() or int(text) < 1:
            raise _bad_request(f"the number of entries to skip must be 1 or more, got {text!r}")
        return web.json_response({"skippedEntries": await _skip(topic, subscription, int(text))})

    async def skip_all(request: web.Request) -> web.Response:
        topic = await topic_of(request)
        subscription = _subscription(topic, request.match_info["subscription"])
        return web.json_response({"skippedEntries": await _skip(topic, subscription, None)})

    topic_path = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
    one = topic_path + "/subscription/{subscription}"
    app.router.add_get(topic_path + "/subscriptions", list_subscriptions)
    app.router.add_put(one, create_subscription)
    app.router.add_delete(one, delete_subscription)
    app.router.add_post(one + "/resetcursor/{timestamp}", reset_cursor_to_time)
    app.router.add_post(one + "/resetcursor", reset_cursor_to_message)
    app.router.add_post(one + "/skip/{count}", skip)
    app.router.add_post(one + "/skip_all", skip_all)
