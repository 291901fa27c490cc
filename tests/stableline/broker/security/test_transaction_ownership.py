"""A transaction is its opener's, on a real `serve --secure` broker (TLS, tokens,
authorization).

Another role (not a superuser) that ends, sends into, acknowledges in or reads a
transaction it did not open is refused with AuthorizationError and nothing changes:
the transaction stays open with what its owner put in it, and the owner finishes it
as planned. What the other role sends is raw gRPC with the owner's transaction id,
as an attacker counting ids (0:1, 0:2, ...) would.
"""

from __future__ import annotations

import queue
import uuid

import grpc
import pytest

import stableline
from stableline import InitialPosition, LimitExceeded
from stableline._proto import broker_pb2 as pb
from stableline._proto import broker_pb2_grpc
from tests.conftest import wait_until

from .conftest import SECURE_MAX_ACKS_PER_TXN, SECURE_MAX_OPEN_TXNS_PER_CLIENT, SecureBroker

EARLIEST = InitialPosition.Earliest


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def roles(secure_broker: SecureBroker) -> None:
    """alice owns transactions; mallory may produce and consume but owns none of them."""
    for role in ("alice", "mallory", "bob", "carol"):
        secure_broker.grant(role, ["produce", "consume"])


def proto_id(txn) -> pb.TxnId:
    return pb.TxnId(most_bits=txn.id[0], least_bits=txn.id[1])


def metadata_of(broker: SecureBroker, txn) -> dict:
    status, body = broker.http(
        "GET", f"/admin/v3/transactions/transactionMetadata?txnId={txn.id[0]}:{txn.id[1]}"
    )
    assert status == 200, body
    return body


def raw_call(broker: SecureBroker, role: str, method: str, request):
    """One unary call as `role`; the RpcError it raised, or the response."""
    with broker.channel() as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        try:
            return getattr(stub, method)(request, timeout=10, metadata=broker.metadata(role))
        except grpc.RpcError as error:
            return error


def assert_refused(error, what: str) -> None:
    assert isinstance(error, grpc.RpcError), f"{what} was answered: {error}"
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error
    assert "belongs to another role" in error.details()
    assert ("stableline-error", "NotAuthorized") in tuple(error.trailing_metadata())


def test_another_role_can_neither_commit_nor_abort_a_transaction_nor_read_it(secure_broker, roles):
    topic = unique("payroll")
    with secure_broker.client("alice") as alice:
        consumer = alice.subscribe(topic, "audit", initial_position=EARLIEST)
        producer = alice.create_producer(topic)
        txn = alice.new_transaction()
        producer.send(b"half 1", txn=txn)  # half its writes: a commit now would be wrong
        for action in (pb.TXN_ACTION_COMMIT, pb.TXN_ACTION_ABORT):
            refused = raw_call(
                secure_broker,
                "mallory",
                "EndTransaction",
                pb.EndTransactionRequest(txn_id=proto_id(txn), action=action),
            )
            assert_refused(refused, "another role's end")
        refused = raw_call(
            secure_broker,
            "mallory",
            "GetTransaction",
            pb.GetTransactionRequest(txn_id=proto_id(txn)),
        )
        assert_refused(refused, "another role's GetTransaction")
        assert metadata_of(secure_broker, txn)["status"] == "OPEN"

        # Its owner reads it and finishes it as planned; a superuser may read it too.
        own = raw_call(
            secure_broker, "alice", "GetTransaction", pb.GetTransactionRequest(txn_id=proto_id(txn))
        )
        assert own.state == pb.TXN_STATE_OPEN
        admin = raw_call(
            secure_broker, "admin", "GetTransaction", pb.GetTransactionRequest(txn_id=proto_id(txn))
        )
        assert admin.state == pb.TXN_STATE_OPEN
        producer.send(b"half 2", txn=txn)
        txn.commit()
        received = [consumer.receive(timeout_millis=5000).data() for _ in range(2)]
        assert received == [b"half 1", b"half 2"]


def test_a_superuser_may_end_any_roles_transaction(secure_broker, roles):
    with secure_broker.client("alice") as alice:
        txn = alice.new_transaction()
        ended = raw_call(
            secure_broker,
            "admin",
            "EndTransaction",
            pb.EndTransactionRequest(txn_id=proto_id(txn), action=pb.TXN_ACTION_ABORT),
        )
        assert ended.state == "ABORTED"


def test_another_roles_send_into_a_transaction_is_refused_and_not_stored(secure_broker, roles):
    topic = unique("shared-topic")
    with secure_broker.client("alice") as alice:
        txn = alice.new_transaction()
        alice.create_producer(topic).send(b"alice's")
        before = alice.get_last_message_id(topic)
        batch = pb.MessageBatch(messages=[pb.SingleMessage(payload=b"forged")])
        requests = [
            pb.ProduceRequest(open=pb.ProducerOpen(topic=topic)),
            pb.ProduceRequest(
                send=pb.ProducerSend(
                    sequence_id=0,
                    metadata=pb.EntryMetadata(num_messages=1, txn_id=proto_id(txn)),
                    payload=batch.SerializeToString(),
                )
            ),
        ]
        with secure_broker.channel() as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            responses = list(
                stub.Produce(iter(requests), timeout=10, metadata=secure_broker.metadata("mallory"))
            )
        assert responses[-1].error.code == "NotAuthorized", responses
        assert "belongs to another role" in responses[-1].error.message
        assert alice.get_last_message_id(topic) == before
        assert metadata_of(secure_broker, txn)["producedPartitions"] == []
        txn.commit()  # still alice's, still open


def test_another_roles_ack_in_a_transaction_is_refused_and_holds_nothing(secure_broker, roles):
    topic = unique("acked")
    with secure_broker.client("alice") as alice:
        message_id = alice.create_producer(topic).send(b"to ack")
        alice.subscribe(topic, "work", initial_position=EARLIEST).close()
        txn = alice.new_transaction()
        requests: queue.Queue = queue.Queue()
        with secure_broker.channel() as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            responses = stub.Subscribe(
                iter(requests.get, None), timeout=10, metadata=secure_broker.metadata("mallory")
            )
            requests.put(
                pb.SubscribeRequest(
                    subscribe=pb.SubscribeOpen(
                        topic=topic, subscription="work", type=pb.SUBSCRIPTION_TYPE_SHARED
                    )
                )
            )
            assert next(responses).HasField("subscribed")
            requests.put(
                pb.SubscribeRequest(
                    ack=pb.Ack(
                        request_id=1,
                        message_ids=[message_id.to_proto()],
                        txn_id=proto_id(txn),
                    )
                )
            )
            done = next(responses)
            requests.put(None)
            responses.cancel()
        assert done.done.request_id == 1
        assert done.done.error_code == "NotAuthorized", done
        assert metadata_of(secure_broker, txn)["ackedPartitions"] == {}
        # Not held for the transaction: the subscription still delivers it.
        consumer = alice.subscribe(topic, "work", consumer_type=stableline.ConsumerType.Shared)
        assert consumer.receive(timeout_millis=5000).message_id() == message_id
        txn.abort()


def test_transaction_names_are_per_role(secure_broker, roles):
    def named(role: str) -> pb.NewTransactionResponse:
        response = raw_call(
            secure_broker,
            role,
            "NewTransaction",
            pb.NewTransactionRequest(timeout_ms=60_000, name="payroll"),
        )
        assert isinstance(response, pb.NewTransactionResponse), response
        return response

    alices, mallorys = named("alice"), named("mallory")
    assert alices.txn_id != mallorys.txn_id
    assert alices.state == mallorys.state == "OPEN"
    assert named("alice").txn_id == alices.txn_id  # asking again joins one's own
    owners = {
        str(response.txn_id.least_bits): role
        for role, response in (("alice", alices), ("mallory", mallorys))
    }
    status, stats = secure_broker.http("GET", "/admin/v3/transactions/coordinatorStats")
    assert status == 200
    listed = {
        t["txnId"].split(":")[1]: t["owner"]
        for t in stats["openTransactions"]
        if t["name"] == "payroll"
    }
    assert listed == owners
    for role, response in (("alice", alices), ("mallory", mallorys)):
        ended = raw_call(
            secure_broker,
            role,
            "EndTransaction",
            pb.EndTransactionRequest(txn_id=response.txn_id, action=pb.TXN_ACTION_ABORT),
        )
        assert ended.state == "ABORTED"


def test_the_admin_transaction_pages_show_the_owner(secure_broker, roles):
    with secure_broker.client("alice") as alice:
        txn = alice.new_transaction()
        assert metadata_of(secure_broker, txn)["owner"] == "alice"
        txn.commit()
        assert metadata_of(secure_broker, txn)["owner"] == "alice"


def test_open_transactions_are_limited_per_role_across_connections(secure_broker, roles):
    clients = [secure_broker.client("carol") for _ in range(SECURE_MAX_OPEN_TXNS_PER_CLIENT + 1)]
    try:
        opened = [client.new_transaction() for client in clients[:-1]]
        with pytest.raises(LimitExceeded, match="max_open_transactions_per_client"):
            clients[-1].new_transaction()
        with secure_broker.client("bob") as bob:
            bob.new_transaction().abort()  # another role is not held back by carol's
        opened[0].abort()
        clients[-1].new_transaction().abort()  # room again once one ended
        for txn in opened[1:]:
            txn.abort()
    finally:
        for client in clients:
            client.close()


def test_acks_in_one_transaction_are_bounded(secure_broker, roles):
    topic = unique("many-acks")
    with secure_broker.client("alice") as alice:
        producer = alice.create_producer(topic)
        for i in range(SECURE_MAX_ACKS_PER_TXN + 1):
            producer.send(f"m{i}".encode())
        consumer = alice.subscribe(
            topic, "bulk", initial_position=EARLIEST, consumer_type=stableline.ConsumerType.Shared
        )
        messages = [
            consumer.receive(timeout_millis=5000) for _ in range(SECURE_MAX_ACKS_PER_TXN + 1)
        ]
        txn = alice.new_transaction()
        for message in messages[:-1]:
            consumer.acknowledge(message, txn=txn)
        with pytest.raises(LimitExceeded, match="max_acks_per_txn"):
            consumer.acknowledge(messages[-1], txn=txn)
        txn.commit()
        consumer.acknowledge(messages[-1])  # outside the transaction it is accepted
        path = f"/admin/v2/persistent/public/default/{topic}/stats"
        wait_until(
            lambda: secure_broker.http("GET", path)[1]["subscriptions"]["bulk"]["msgBacklog"] == 0,
            message="the committed acks and the plain one to empty the backlog",
        )


def test_the_owner_ends_its_transaction_after_a_restart_and_others_still_cannot(
    secure_broker, roles
):
    topic = unique("restarted")
    with secure_broker.client("alice") as alice:
        txn = alice.new_transaction()
        alice.create_producer(topic).send(b"before the restart", txn=txn)
        secure_broker.process.restart()
        # The owner is recorded with the transaction: a restart does not make it anyone's.
        refused = raw_call(
            secure_broker,
            "mallory",
            "EndTransaction",
            pb.EndTransactionRequest(txn_id=proto_id(txn), action=pb.TXN_ACTION_COMMIT),
        )
        assert_refused(refused, "another role's end after a restart")
        txn.commit()  # the same client, reconnected
        reader = alice.create_reader(topic, start_message_id=stableline.MessageId.earliest)
        assert reader.read_next(5000).data() == b"before the restart"
    with secure_broker.client("alice") as again:
        own = raw_call(
            secure_broker, "alice", "GetTransaction", pb.GetTransactionRequest(txn_id=proto_id(txn))
        )
        assert own.state == pb.TXN_STATE_COMMITTED
        again.new_transaction().abort()
