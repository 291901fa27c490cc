"""One IsolationLevel: the dispatcher's, which the client re-exports, with its code on
the wire beside it; the client does not load the dispatcher's engine to get it (test_text_forms checks)."""

from __future__ import annotations

import dispatcher
import stableline
from stableline import aio
from stableline._proto import broker_pb2 as pb
from stableline._types import ISOLATION_LEVEL_PROTO


def test_every_face_names_the_dispatcher_s_isolation_level():
    assert stableline.IsolationLevel is aio.IsolationLevel is dispatcher.IsolationLevel


def test_every_level_has_its_wire_code():
    assert ISOLATION_LEVEL_PROTO == {
        dispatcher.IsolationLevel.READ_COMMITTED: pb.ISOLATION_LEVEL_READ_COMMITTED,
        dispatcher.IsolationLevel.READ_UNCOMMITTED: pb.ISOLATION_LEVEL_READ_UNCOMMITTED,
    }


def test_a_level_parses_from_text_and_from_itself():
    level = stableline.IsolationLevel
    assert level.parse("read-uncommitted") is level.READ_UNCOMMITTED
    assert level.parse(level.READ_COMMITTED) is level.READ_COMMITTED
