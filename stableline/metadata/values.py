"""The metadata store's values: what a read returns, what a watch delivers, session states.

All frozen: a `Stat` read is a snapshot of one key at one revision, never updated in place.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Stat:
    """One key's version as the store saw it.

    `version` counts changes: 0 when the key is created, +1 for each put since
    (Pulsar's Stat.version); a compare-and-set names it. `created_revision` and
    `modified_revision` are the store-wide revisions (etcd's create/mod revision;
    the embedded store keeps its own counter) of the key's creation and last put.
    `ephemeral`: the key lives only as long as the session that wrote it.
    """

    version: int
    created_revision: int
    modified_revision: int
    ephemeral: bool

    def __post_init__(self) -> None:
        assert self.version >= 0, self.version
        assert 0 < self.created_revision <= self.modified_revision, self


@dataclass(frozen=True, slots=True)
class GetResult:
    value: bytes
    stat: Stat


class NotificationType(enum.Enum):
    CREATED = "created"
    """A key that did not exist now does."""
    MODIFIED = "modified"
    """An existing key got a new value."""
    DELETED = "deleted"
    """A key was deleted, or its session ended (an ephemeral key)."""


@dataclass(frozen=True, slots=True)
class Notification:
    """One change under a watched prefix.

    `revision` is the store-wide revision of the change (the deletion's own for
    DELETED), so a reader can order it against what it read; `result` is the key's
    value and stat after a CREATED or MODIFIED change (None for DELETED). Two
    notifications are equal when their type and path are: the rest is what the
    change carried.
    """

    type: NotificationType
    path: str
    revision: int = field(default=0, compare=False)
    result: GetResult | None = field(default=None, compare=False)


class SessionState(enum.Enum):
    """Whether this store's ephemeral keys can be trusted to exist (Pulsar's session)."""

    CONNECTED = "connected"
    """The store reaches its backend and its session (etcd lease) is alive."""
    SUSPENDED = "suspended"
    """The backend is unreachable; the session may still be alive there. Ephemeral
    keys may still exist, but for at most the rest of the session timeout: a broker
    keeps serving what it owns and takes no new ownership."""
    LOST = "lost"
    """The session is (or must be assumed) expired: its ephemeral keys are gone or
    about to be, and others may act on that. A broker stops writing what it owned.
    Declared before the backend's own expiry, so it is never late."""
    CLOSED = "closed"
    """close() was called; nothing more happens."""


class SessionEvent(enum.Enum):
    """A change of session state, as Pulsar's SessionEvent names them."""

    CONNECTION_LOST = "ConnectionLost"
    """CONNECTED -> SUSPENDED."""
    RECONNECTED = "Reconnected"
    """SUSPENDED -> CONNECTED with the same session: ephemeral keys were kept."""
    SESSION_LOST = "SessionLost"
    """-> LOST: ephemeral keys of the old session are gone or going."""
    SESSION_REESTABLISHED = "SessionReestablished"
    """LOST -> CONNECTED with a new session: whoever held ephemeral keys writes them again."""
