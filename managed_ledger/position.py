"""Positions in a topic's log: (ledger_id, entry_id), totally ordered."""

from __future__ import annotations

import re
from typing import NamedTuple

_MAX = 2**63 - 1
# ASCII digits only: int() alone would also take '+1', ' 1', '1_0' and other scripts' digits.
_POSITION_TEXT = re.compile(r"(-?[0-9]+):(-?[0-9]+)")


class Position(NamedTuple):
    """A tuple, so ordering, equality and hashing run in C: positions are compared and
    hashed per entry on every path (cache, cursors, dispatch), where a frozen
    dataclass's Python-level methods cost several times more (timeit a comparison
    and a construction of each to see it)."""

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """ "ledger:entry" (the text __str__ makes) -> Position; ValueError otherwise."""
        match = _POSITION_TEXT.fullmatch(text)
        if match is None:
            raise ValueError(
                f"not a position {text!r}: expected 'ledger_id:entry_id', two whole "
                "numbers (e.g. '3:120'; -1 stands before the first)"
            )
        return cls(int(match[1]), int(match[2]))

    def next_in_ledger(self) -> Position:
        return Position(self.ledger_id, self.entry_id + 1)


# Before every entry of every ledger; the mark-delete position of a cursor that has
# acknowledged nothing yet.
EARLIEST = Position(-1, -1)
# After every entry that will ever exist.
LATEST = Position(_MAX, _MAX)
