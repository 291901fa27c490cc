"""Typed errors of the metadata store; each message names the path (or URL) and what to do."""

from __future__ import annotations


class MetadataStoreError(Exception):
    """Base of every metadata store error."""


class NotFound(MetadataStoreError):
    """The key does not exist (a delete, or a CAS that needs it)."""

    def __init__(self, path: str):
        self.path = path
        super().__init__(f"metadata key {path} does not exist")


class BadVersion(MetadataStoreError):
    """A compare-and-set lost: the key is not at the expected version.

    Someone else changed it first; re-read it and decide again.
    """

    def __init__(self, path: str, expected: int, actual: int | None):
        self.path = path
        self.expected = expected
        self.actual = actual
        now = "does not exist" if actual is None else f"is at version {actual}"
        super().__init__(
            f"metadata key {path} {now}, expected version {expected}; "
            f"another writer changed it first: re-read it and retry"
        )


class AlreadyExists(BadVersion):
    """A create (expected version -1) found the key there already."""

    def __init__(self, path: str, actual: int):
        MetadataStoreError.__init__(
            self, f"metadata key {path} already exists (version {actual}); read it instead"
        )
        self.path = path
        self.expected = -1
        self.actual = actual


class MetadataStoreUnavailable(MetadataStoreError):
    """The store cannot answer now: its backend is unreachable, refused us, or the
    store is closed. Retryable unless the message says otherwise."""


class WatchOverflow(MetadataStoreError):
    """A watch's reader fell too far behind and the watch ended: re-read what it
    covers and watch again."""


class InvalidPath(MetadataStoreError, ValueError):
    """A path that is not `/segment[/segment...]`."""
