"""Producers' last sequence ids in one topic, for de-duplication.

As in Pulsar's message de-duplication and Kafka's idempotent producer, a named
producer numbers its batches, and the topic remembers per name the highest
sequence id pushed (accepted for appending) and persisted (durable). A batch at
or below it is a duplicate (a resend after a reconnect, a retried Spark task)
and is not written again. The persisted ids are rebuilt from entry headers when
the log is replayed and kept in the transaction buffer's snapshots.

Every name is tracked, the ones the broker generates for producers that gave none
included (as in Pulsar, a client reopens with the name it was given, so its
resends after a reconnect are de-duplicated too; generated names are unique per
broker run). At most MAX_PRODUCERS names are (the least recently used is
forgotten first). A name is also forgotten when retention deletes the ledger of
its last entry, as ends of transactions are (rule 5), so a replay of the
retained log and the live state always agree.
A failed append of a named producer whose later batch succeeded leaves a hole
that de-duplication does not fill: the producer hears of the failure and must
not resend a batch below what later succeeded.
"""

from __future__ import annotations

from collections import OrderedDict

ANONYMOUS_PREFIX = "anonymous-"
MAX_PRODUCERS = 10_000


def tracked(producer_name: str) -> bool:
    """Whether batches of this producer are de-duplicated: those that have a name."""
    return bool(producer_name)


class ProducerSequences:
    def __init__(self) -> None:
        # name -> (last sequence id, ledger of that entry), least recently used first
        self.persisted: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self._pushed: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.persisted)

    def last(self, name: str) -> int:
        """The highest sequence id of `name` accepted so far (-1: none)."""
        return max(self._pushed.get(name, -1), self.persisted.get(name, (-1, 0))[0])

    def is_duplicate(self, name: str, sequence_id: int) -> bool:
        return sequence_id <= self.last(name)

    def push(self, name: str, sequence_id: int) -> None:
        assert not self.is_duplicate(name, sequence_id), (name, sequence_id)
        self._pushed[name] = sequence_id

    def rollback(self, name: str) -> None:
        """The push failed: back to what is persisted."""
        self._pushed.pop(name, None)

    def persist(self, name: str, sequence_id: int, ledger_id: int) -> None:
        """An entry of `name` with this sequence id is durable (at run time or in replay)."""
        if sequence_id > self.persisted.get(name, (-1, 0))[0]:
            self.persisted[name] = (sequence_id, ledger_id)
        self.persisted.move_to_end(name)
        if self._pushed.get(name, -1) <= sequence_id:
            self._pushed.pop(name, None)
        while len(self.persisted) > MAX_PRODUCERS:
            forgotten, _ = self.persisted.popitem(last=False)
            self._pushed.pop(forgotten, None)

    def forget_ledger(self, ledger_id: int) -> None:
        """Retention deleted this ledger: forget the names whose last entry it held."""
        for name in [n for n, (_, ledger) in self.persisted.items() if ledger == ledger_id]:
            del self.persisted[name]

    def load(self, persisted: dict[str, tuple[int, int]]) -> None:
        self.persisted = OrderedDict(persisted)
        self._pushed.clear()
