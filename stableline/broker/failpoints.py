"""The broker's failpoint hook, for crash tests (config `failpoints`, off by default).

`failpoints = "txn-decided,txn-end-topic:persistent://public/default/b"` arms
failpoints by name, or by name and detail. A broker reaching an armed one prints
`{"event": "failpoint", "name": ..., "detail": ...}` on stdout, logs a warning,
and waits there until SIGUSR1 releases every failpoint for good, or it is killed.
"""

from __future__ import annotations

import asyncio
import json
import logging

log = logging.getLogger(__name__)


class Failpoints:
    def __init__(self, spec: str):
        self.armed = {part.strip() for part in spec.split(",") if part.strip()}
        self._released = asyncio.Event()

    def release(self) -> None:
        log.warning("failpoints released")
        self.armed.clear()
        self._released.set()

    async def __call__(self, name: str, detail: str) -> None:
        if name not in self.armed and f"{name}:{detail}" not in self.armed:
            return
        log.warning("failpoint %s reached (%s); waiting for SIGUSR1", name, detail)
        print(json.dumps({"event": "failpoint", "name": name, "detail": detail}), flush=True)
        await self._released.wait()
