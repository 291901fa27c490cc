"""What MessageId's callable parts cost: making an id, and reading a part.

Every received message and every send receipt makes a MessageId, so making one
must cost what it cost when its parts were plain itemgetter properties. Reading
`msg_id.ledger_id` now makes an IdPart (an int that may be called, as
pulsar-client's `ledger_id()`), which costs more than the plain int it was. The
baseline is that earlier layout, a tuple subclass with itemgetter properties,
defined here and timed in the same run; each figure is the best of several
repeats, in nanoseconds.

    python scripts/bench/bench_message_id.py [--number N] [--repeat R] [--json PATH]
"""

from __future__ import annotations

import argparse
import operator
import time
import timeit
from pathlib import Path

from results_file import finish

from stableline._types import MessageId


class ItemgetterId(tuple):
    """The layout before IdPart: parts read as plain ints, through C itemgetters."""

    __slots__ = ()

    def __new__(cls, ledger_id: int, entry_id: int, batch_index: int = -1) -> ItemgetterId:
        return tuple.__new__(cls, (ledger_id, entry_id, batch_index))

    ledger_id = property(operator.itemgetter(0))


def _ns(statement: str, namespace: dict, number: int, repeat: int) -> float:
    best = min(timeit.repeat(statement, globals=namespace, number=number, repeat=repeat))
    return round(best / number * 1e9, 1)


def bench(number: int, repeat: int) -> dict:
    namespace = {
        "MessageId": MessageId,
        "ItemgetterId": ItemgetterId,
        "new": tuple.__new__,
        "msg_id": MessageId(3, 120, 7),
        "old_id": ItemgetterId(3, 120, 7),
    }
    figures = {
        # Message.message_id() makes its id with tuple.__new__, from C.
        "make_from_message_ns": _ns("new(MessageId, (3, 120, 7))", namespace, number, repeat),
        "make_from_message_baseline_ns": _ns(
            "new(ItemgetterId, (3, 120, 7))", namespace, number, repeat
        ),
        "make_ns": _ns("MessageId(3, 120, 7)", namespace, number, repeat),
        "make_baseline_ns": _ns("ItemgetterId(3, 120, 7)", namespace, number, repeat),
        "read_attribute_ns": _ns("msg_id.ledger_id", namespace, number, repeat),
        "read_attribute_baseline_ns": _ns("old_id.ledger_id", namespace, number, repeat),
        "read_call_ns": _ns("msg_id.ledger_id()", namespace, number, repeat),
        "read_index_ns": _ns("msg_id[0]", namespace, number, repeat),
    }
    figures["make_from_message_ratio"] = round(
        figures["make_from_message_ns"] / figures["make_from_message_baseline_ns"], 3
    )
    figures["make_ratio"] = round(figures["make_ns"] / figures["make_baseline_ns"], 3)
    figures["read_attribute_ratio"] = round(
        figures["read_attribute_ns"] / figures["read_attribute_baseline_ns"], 3
    )
    return figures


def main() -> int:
    started = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--number", type=int, default=1_000_000, help="statements per repeat")
    parser.add_argument("--repeat", type=int, default=7, help="repeats; the best counts")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args()
    result = bench(args.number, args.repeat)
    for key, value in result.items():
        print(f"{key}: {value}")
    return finish(result, started, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
