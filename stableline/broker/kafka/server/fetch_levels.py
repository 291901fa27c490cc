"""The isolation level each Kafka client last fetched at, by client id.

Kafka fetches do not name their consumer group, yet a group's stableline
subscription has one isolation level, fixed when it is made (at the group's first
commit). So the Fetch handler records here the level of each client id's latest
Fetch, and a commit that creates a group's subscription takes the level of the
committing client's id: READ_COMMITTED when that client has not fetched from this
broker (stableline's default). Two clients sharing a client id but reading at
different levels share one entry: the latest Fetch wins.

Bounded: at most MAX_CLIENTS ids, the least recently fetching forgotten first.
"""

from __future__ import annotations

from collections import OrderedDict

from dispatcher import IsolationLevel
from stableline.broker.kafka.protocol import messages as m

MAX_CLIENTS = 10_000

_LEVELS = {
    m.IsolationLevel.READ_COMMITTED: IsolationLevel.READ_COMMITTED,
    m.IsolationLevel.READ_UNCOMMITTED: IsolationLevel.READ_UNCOMMITTED,
}


class ClientIsolationLevels:
    """client id -> the stableline level of its latest Fetch."""

    def __init__(self, max_clients: int = MAX_CLIENTS) -> None:
        assert max_clients >= 1
        self._max_clients = max_clients
        self._levels: OrderedDict[str, IsolationLevel] = OrderedDict()

    def record(self, client_id: str | None, level: m.IsolationLevel) -> None:
        key = client_id or ""
        self._levels[key] = _LEVELS[level]
        self._levels.move_to_end(key)
        while len(self._levels) > self._max_clients:
            self._levels.popitem(last=False)

    def level_of(self, client_id: str | None) -> IsolationLevel:
        """The level of the client's latest Fetch here; READ_COMMITTED if none."""
        return self._levels.get(client_id or "", IsolationLevel.READ_COMMITTED)

    def __len__(self) -> int:
        return len(self._levels)
