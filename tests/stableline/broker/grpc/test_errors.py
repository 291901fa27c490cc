"""Internal errors reach clients as an id, their text stays in the broker log: in
process with a real LMDB error, and through a broker process whose failpoint makes
an append fail unexpectedly."""

from __future__ import annotations

import logging
import re
import signal
import time

import grpc
import lmdb
import pytest

import stableline
from stableline.broker.grpc.errors import classify
from stableline.testing import BrokerProcess

INTERNAL_ERROR_MESSAGE = re.compile(r"internal error \(id ([0-9a-f]{8})\); see the broker log")


@pytest.fixture
def lmdb_error(tmp_path) -> lmdb.Error:
    """A real LMDB error: a write to an environment opened read-only."""
    lmdb.open(str(tmp_path / "db")).close()
    env = lmdb.open(str(tmp_path / "db"), readonly=True)
    try:
        with env.begin(write=True) as txn:
            txn.put(b"k", b"v")
    except lmdb.Error as error:
        return error
    finally:
        env.close()
    raise AssertionError("the read-only write did not fail")


def test_an_internal_error_sends_an_id_and_logs_its_text_with_that_id(lmdb_error, caplog):
    with caplog.at_level(logging.ERROR, logger="stableline.broker.grpc.errors"):
        broker_error = classify(lmdb_error)
    assert broker_error.status is grpc.StatusCode.INTERNAL
    message = str(broker_error)
    match = INTERNAL_ERROR_MESSAGE.fullmatch(message)
    assert match, message
    assert str(lmdb_error) not in message and "mdb" not in message.lower()
    logged = [r for r in caplog.records if f"(id {match[1]})" in r.getMessage()]
    assert logged and str(lmdb_error) in logged[0].getMessage()


def test_each_internal_error_gets_its_own_id(lmdb_error):
    assert str(classify(lmdb_error)) != str(classify(lmdb_error))


def test_a_broker_answers_an_unexpected_failure_with_an_id_and_logs_its_traceback_under_it(
    tmp_path,
):
    topic = "persistent://public/default/failing"
    broker = BrokerProcess(
        tmp_path / "data", env={"STABLELINE_FAILPOINTS": f"internal-error:{topic}"}
    )
    broker.start()
    try:
        with stableline.Client(broker.service_url) as client:
            producer = client.create_producer(topic)
            with pytest.raises(stableline.StableLineError) as failed:
                producer.send(b"refused")
            match = INTERNAL_ERROR_MESSAGE.fullmatch(str(failed.value))
            assert match, str(failed.value)
            assert "InjectedFault" not in str(failed.value)
            # The log has the same id, with the error and its traceback.
            log = broker.log()
            logged = log[log.index(f"internal error (id {match[1]}): InjectedFault") :]
            traceback = logged[: logged.index("InjectedFault: failpoint internal-error")]
            assert "Traceback (most recent call last)" in traceback
            # The broker serves on: released, the same producer's next send is stored.
            broker.signal(signal.SIGUSR1)
            deadline = time.monotonic() + 10
            while "failpoints released" not in broker.log():
                assert time.monotonic() < deadline, broker.log()
                time.sleep(0.02)
            producer.send(b"stored")
            reader = client.create_reader(topic, stableline.MessageId.earliest)
            assert reader.read_next(10_000).data() == b"stored"
            assert not reader.has_message_available()
    finally:
        assert broker.stop() == 0, broker.log()
