"""Pieces shared by the kill-and-restart tools (txn_kill_cycles.py, chaos.py): a
topic's transaction buffer as the admin API shows it, and waiting on a condition."""

from __future__ import annotations

import time

from managed_ledger import Position
from stableline.testing import BrokerProcess


def buffer_stats(broker: BrokerProcess, topic: str) -> dict:
    """The topic's transactionBufferStats document (short topic name, public/default)."""
    return broker.admin(f"/admin/v3/transactions/transactionBufferStats/public/default/{topic}")


def parse_position(text: str) -> Position:
    """ "ledger:entry" as a comparable position."""
    return Position.parse(text)


def settled(broker: BrokerProcess, topics: tuple[str, ...]) -> bool:
    """Every topic's buffer READY with nothing open: each transaction of a kill has ended."""
    try:
        stats = [buffer_stats(broker, topic) for topic in topics]
    except OSError:
        return False
    return all(s["state"] == "Ready" and s["ongoingTxnSize"] == 0 for s in stats)


def wait_until(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout_s} s")
        time.sleep(0.05)
