"""Failpoints: named places where a crash test can hold the engine and kill it.

The engine only says where it is (`reach`); what happens there is the caller's
hook (the broker pauses there when started with a failpoint armed). Without a
hook a failpoint costs one `is None` test.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

# (name, detail) -> completes when the engine may go on.
Failpoint = Callable[[str, str], Awaitable[None]]

TXN_DECIDED = "txn-decided"  # decision durable, no marker written yet; detail: the TxnID
TXN_END_TOPIC = "txn-end-topic"  # before one topic's marker; detail: the topic
BUFFER_RECOVERY = "txn-buffer-recovery"  # snapshot loaded, log not replayed; detail: the topic


async def reach(failpoint: Failpoint | None, name: str, detail: str) -> None:
    if failpoint is not None:
        await failpoint(name, detail)
