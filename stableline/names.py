"""Subscription and producer names: what the broker accepts before it writes one.

A subscription's name is part of its cursor's key in the metadata store (after
the topic's name), and a producer's name is kept with its sequence ids; both
travel in HTTP paths and logs. A name is 1 to MAX_NAME_BYTES bytes of UTF-8
(the topic name's limit, so a topic's and a subscription's together fit the
store's key), printable (no control characters), without "/" (a path separator
in the admin API).
"""

from __future__ import annotations

MAX_NAME_BYTES = 255


class InvalidNameError(ValueError):
    """The name breaks the rule; the message states it."""


def check_name(kind: str, name: str) -> str:
    """`name` if it is a valid `kind` name ("subscription", "producer"), else raises."""
    rule = f"a {kind} name is 1 to {MAX_NAME_BYTES} bytes of UTF-8, printable, without '/'"
    if not name:
        raise InvalidNameError(f"{kind} name is empty: {rule}")
    size = len(name.encode("utf-8", errors="surrogatepass"))
    if size > MAX_NAME_BYTES:
        raise InvalidNameError(f"{kind} name is {size} bytes long: {rule}")
    if not name.isprintable() or "/" in name:
        raise InvalidNameError(f"invalid {kind} name {name[:40]!r}: {rule}")
    return name
