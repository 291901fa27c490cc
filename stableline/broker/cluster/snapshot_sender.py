"""The writer's transaction-buffer snapshots, sent to one other member of the ensemble.

A snapshot is written incrementally, and each copy names the state it follows
(managed_ledger/snapshot_copy.py). One `SnapshotSender` per member sends them, one
call at a time and in the order they were written, in the background:
- a member holding another state refuses the change (ReplicaSnapshotMismatch): it
  is sent the whole snapshot, read from the writer's store at that moment;
- a snapshot written while a call is under way is not queued behind it: once the
  call ends, the member is sent the whole snapshot as it then is (it may have
  missed the changes in between), so at most one copy waits, whatever the rate;
- a call that fails otherwise (the member is away, a timeout) is logged and
  forgotten: the next snapshot's change is refused if the member missed this one,
  and a member back from away is sent the whole snapshot (`send_whole`).
Nothing here ever blocks or fails a write: snapshots are an optimisation of the
new owner's recovery, which replays the whole log without them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from managed_ledger import ReplicaFencedError, ReplicaSnapshotMismatchError, SnapshotCopy
from stableline.broker.cluster.peers import ReplicaPeers

log = logging.getLogger(__name__)

# One snapshot call waits this long for its member.
SNAPSHOT_CALL_TIMEOUT_S = 5.0


class SnapshotSender:
    """Sends one member the writer's snapshots; see the module docstring."""

    def __init__(
        self,
        address: str,
        topic: str,
        epoch: int,
        peers: ReplicaPeers,
        whole: Callable[[], SnapshotCopy | None],
        on_fenced: Callable[[ReplicaFencedError], None],
    ):
        self.address = address
        self._topic = topic
        self._epoch = epoch
        self._peers = peers
        self._whole = whole
        self._on_fenced = on_fenced
        # The change to send next; None with `_send_whole`: the whole snapshot.
        self._next: SnapshotCopy | None = None
        self._send_whole = False
        self._task: asyncio.Task | None = None
        self._closed = False
        self.sent = 0
        self.wholes_sent = 0
        self.failed = 0

    def offer(self, copy: SnapshotCopy) -> None:
        """A snapshot was written: send it (or the whole, after one in flight)."""
        if self._closed:
            return
        if self._task is not None:
            # A call is under way or a copy waits: the member may miss this change
            # or get it out of order, so it gets the whole snapshot next instead.
            self._next, self._send_whole = None, True
            return
        self._next = copy
        self._start()

    def send_whole(self) -> None:
        """Send the whole snapshot (a member back from away)."""
        if self._closed:
            return
        self._next, self._send_whole = None, True
        if self._task is None:
            self._start()

    @property
    def busy(self) -> bool:
        return self._task is not None

    def _start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"snapshot:{self._topic}:{self.address}")

    async def _run(self) -> None:
        try:
            while not self._closed and (self._next is not None or self._send_whole):
                copy, whole = self._next, self._send_whole
                self._next, self._send_whole = None, False
                if whole or copy is None:
                    copy = self._whole()
                    if copy is None:
                        continue  # nothing written here yet
                await self._send(copy)
        finally:
            self._task = None

    async def _send(self, copy: SnapshotCopy) -> None:
        try:
            try:
                await self._call(copy)
            except ReplicaSnapshotMismatchError:
                whole = self._whole()
                if whole is None:
                    return
                log.debug(
                    "%s: replica %s holds another snapshot; sending it whole",
                    self._topic,
                    self.address,
                )
                await self._call(whole)
        except asyncio.CancelledError:
            raise
        except ReplicaFencedError as error:
            self._on_fenced(error)
            self.close()
        except Exception as error:
            self.failed += 1
            log.warning(
                "%s: transaction buffer snapshot not sent to replica %s (it gets a later one): %r",
                self._topic,
                self.address,
                error,
            )

    async def _call(self, copy: SnapshotCopy) -> None:
        await self._peers.replicate_snapshot(
            self.address, self._topic, self._epoch, copy, timeout_s=SNAPSHOT_CALL_TIMEOUT_S
        )
        self.sent += 1
        if copy.whole:
            self.wholes_sent += 1

    def close(self) -> None:
        self._closed = True
        self._next, self._send_whole = None, False
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
