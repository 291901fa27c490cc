"""Transaction admin on Pulsar's paths, beside the coordinator's own documents:

    GET /admin/v3/transactions/transactionMetadata/{mostSigBits}/{leastSigBits}
    GET /admin/v3/transactions/slowTransactions/{timeout_ms}   (or ?timeout=timeout_ms)
    GET /admin/v3/transactions/pendingAckStats/{tenant}/{namespace}/{topic}/{subscription}

The metadata and slow-transaction documents are the coordinator's describe() (the
same as `transactionMetadata?txnId=most:least`); slowTransactions maps each
transaction id to it. A transaction is slow once it has lived longer than the
timeout without ending: open, or decided and still ending. pendingAckStats is what a
subscription holds for transactions (acks taken, neither applied nor released
until the transaction ends), in Pulsar's fields plus the held message ids.

Bad numbers answer 400 with what is expected; an unknown transaction, topic,
subscription or coordinator 404.
"""

from __future__ import annotations

import json
import time
from typing import Any

from aiohttp import web

from managed_ledger import TxnId
from stableline.broker.http.paths import topic_name
from stableline.broker.topics.registry import TopicRegistry
from stableline.broker.txn.coordinators import Coordinators
from stableline.broker.txn.stats import COORDINATOR_READY, RecoveryWindow
from txnbuffer import TxnMetadata

TRANSACTIONS = "/admin/v3/transactions"


def _reason(status: int, reason: str) -> web.Response:
    return web.json_response({"reason": reason}, status=status)


def _whole_number(text: str | None, what: str) -> int:
    """ASCII digits only (no sign, spaces or other scripts' digits) -> int."""
    if text is None or not text.isascii() or not text.isdigit():
        raise web.HTTPBadRequest(
            text=json.dumps({"reason": f"{what} must be a whole number >= 0, got {text!r}"}),
            content_type="application/json",
        )
    return int(text)


def slow_transactions(
    coordinators: Coordinators, timeout_ms: int, now_ms: int, shard: int | None = None
) -> dict[str, dict[str, Any]]:
    """Transactions not yet ended that opened more than timeout_ms before now_ms (of
    every shard led here, or of `shard`)."""
    return {
        str(meta.txn_id): meta.describe()
        for meta in coordinators.list_open()
        if shard is None or meta.txn_id.most_bits == shard
        if now_ms - meta.opened_ms > timeout_ms
    }


def _held_message_ids(meta: TxnMetadata, topic: str, subscription: str) -> list[str]:
    return [
        f"{ledger_id}:{entry_id}:{batch_index}"
        for ack in meta.acks
        if ack.topic == topic and ack.subscription == subscription
        for ledger_id, entry_id, batch_index in ack.message_ids
    ]


def pending_ack_stats(
    coordinators: Coordinators,
    topic: str,
    subscription: str,
    recovery: RecoveryWindow,
) -> dict[str, Any]:
    """Pulsar's TransactionPendingAckStats fields, and what each transaction holds.

    The holds are rebuilt from the coordinator's records at a restart, so the
    recovery times are the coordinator's."""
    pending = []
    for meta in coordinators.list_open():
        held = _held_message_ids(meta, topic, subscription)
        if held:
            pending.append(
                {"txnId": str(meta.txn_id), "status": meta.state.value, "messageIds": held}
            )
    return {
        "state": COORDINATOR_READY,
        "lowWaterMarks": {str(k): v for k, v in coordinators.low_watermarks().items()},
        "ongoingTxnSize": len(pending),
        "recoverStartTime": recovery.started_ms,
        "recoverEndTime": recovery.ended_ms,
        "pendingAckMessages": sum(len(p["messageIds"]) for p in pending),
        "pendingAcks": pending,
    }


def add_routes(
    app: web.Application,
    registry: TopicRegistry,
    coordinators: Coordinators,
    recovery: RecoveryWindow,
) -> None:
    def check_coordinator(request: web.Request) -> web.Response | int | None:
        """The shard asked for (None: all), or the 404 when it is not led here."""
        text = request.query.get("coordinatorId")
        if text is None:
            return None
        shard = _whole_number(text, "coordinatorId")
        if shard not in coordinators.local:
            return _reason(
                404,
                f"transaction coordinator {text} is not led by this broker: it leads "
                f"coordinators {sorted(coordinators.local)} of {coordinators.shard_count}",
            )
        return shard

    async def transaction_metadata(request: web.Request) -> web.Response:
        info = request.match_info
        most = _whole_number(info["most"], "mostSigBits")
        least = _whole_number(info["least"], "leastSigBits")
        if most >= 2**64 or least >= 2**64:
            return _reason(400, "mostSigBits and leastSigBits must be below 2**64")
        txn_id = TxnId(most, least)
        return web.json_response((await coordinators.leading(txn_id)).get(txn_id).describe())

    async def slow(request: web.Request) -> web.Response:
        text = request.match_info.get("timeout", request.query.get("timeout"))
        timeout_ms = _whole_number(text, "the timeout (milliseconds)")
        shard = check_coordinator(request)
        if isinstance(shard, web.Response):
            return shard
        now_ms = int(time.time() * 1000)
        return web.json_response(slow_transactions(coordinators, timeout_ms, now_ms, shard))

    async def pending_acks(request: web.Request) -> web.Response:
        topic = await registry.get(topic_name(request), create=False)
        subscription = request.match_info["subscription"]
        if subscription not in topic.subscriptions:
            return _reason(404, f"subscription {subscription!r} does not exist on {topic.name}")
        return web.json_response(
            pending_ack_stats(coordinators, str(topic.name), subscription, recovery)
        )

    app.router.add_get(TRANSACTIONS + "/transactionMetadata/{most}/{least}", transaction_metadata)
    app.router.add_get(TRANSACTIONS + "/slowTransactions", slow)
    app.router.add_get(TRANSACTIONS + "/slowTransactions/{timeout}", slow)
    app.router.add_get(
        TRANSACTIONS + "/pendingAckStats/{tenant}/{namespace}/{topic}/{subscription}",
        pending_acks,
    )
