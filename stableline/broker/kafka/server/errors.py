"""The Kafka error code the error table gives an exception's stable code.

A handler answers with kafka_error(error) where the table's code is the answer;
where one API means something more exact (Kafka's CreateTopics answers
INVALID_PARTITIONS for a bad count, a placement that waits answers
LEADER_NOT_AVAILABLE) the handler names its own code beside it.
"""

from __future__ import annotations

from stableline.broker.errors import code_of
from stableline.broker.kafka.protocol import messages as m
from stableline.error_codes import row_of


def kafka_error(error: BaseException) -> m.ErrorCode:
    """`error`'s Kafka code; UNKNOWN_SERVER_ERROR for a code Kafka has no answer for."""
    kafka = row_of(code_of(error)).kafka_error
    return m.ErrorCode.UNKNOWN_SERVER_ERROR if kafka is None else m.ErrorCode(int(kafka))
