"""Token authentication and permissions on the gRPC port, against a real broker.

Refused calls get UNAUTHENTICATED / PERMISSION_DENIED and leave no trace: a
superuser looks afterwards and finds no topic, no entry and no subscription.
"""

from __future__ import annotations

import time
import uuid

import grpc
import jwt
import pytest

import stableline
from stableline import AuthenticationError, AuthenticationToken, AuthorizationError
from stableline._proto import admin_pb2, admin_pb2_grpc, broker_pb2, broker_pb2_grpc
from stableline.broker.security.tokens import create_secret_key, create_token
from stableline.testing import BrokerProcess

from .conftest import SUPERUSER, http


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def client_for(broker, token: str | None) -> stableline.Client:
    authentication = AuthenticationToken(token) if token else None
    return stableline.Client(broker.service_url, authentication=authentication)


@pytest.fixture(scope="module")
def superuser(auth_broker, keys):
    with client_for(auth_broker, keys.token(SUPERUSER)) as connected:
        yield connected


def grant(broker, keys, path: str, role: str, actions: list[str]) -> None:
    status, body = http(broker, "POST", f"{path}/{role}", keys.token(SUPERUSER), actions)
    assert status == 204, body


def topic_exists(broker, keys, topic: str) -> bool:
    status, names = http(
        broker, "GET", "/admin/v2/persistent/public/default", keys.token(SUPERUSER)
    )
    assert status == 200
    return f"persistent://public/default/{topic}" in names


def subscriptions(broker, keys, topic: str) -> dict:
    path = f"/admin/v2/persistent/public/default/{topic}/stats"
    status, stats = http(broker, "GET", path, keys.token(SUPERUSER))
    assert status == 200, stats
    return stats["subscriptions"]


def test_without_a_token_produce_is_unauthenticated_and_creates_nothing(auth_broker, keys):
    topic = unique("no-token")
    with (
        client_for(auth_broker, None) as anonymous,
        pytest.raises(AuthenticationError, match="Bearer"),
    ):
        anonymous.create_producer(topic)
    assert not topic_exists(auth_broker, keys, topic)


def test_without_a_token_consume_read_and_transactions_are_unauthenticated(
    auth_broker, keys, superuser
):
    topic = unique("no-token-read")
    superuser.create_producer(topic).send(b"secret")
    with client_for(auth_broker, None) as anonymous:
        with pytest.raises(AuthenticationError):
            anonymous.subscribe(
                topic, "sneaky", initial_position=stableline.InitialPosition.Earliest
            )
        with pytest.raises(AuthenticationError):
            anonymous.create_reader(topic).read_next(1000)
        with pytest.raises(AuthenticationError):
            anonymous.get_last_message_id(topic)
        with pytest.raises(AuthenticationError):
            anonymous.new_transaction()
    assert subscriptions(auth_broker, keys, topic) == {}


def test_without_a_token_admin_rpcs_are_unauthenticated(auth_broker, keys):
    topic = unique("admin-rpc")
    with grpc.insecure_channel(auth_broker.service_url) as channel:
        admin = admin_pb2_grpc.AdminStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            admin.CreateTopic(admin_pb2.TopicRequest(topic=topic), timeout=10)
        assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # A data-plane role is not an admin either.
        with pytest.raises(grpc.RpcError) as raised:
            admin.CreateTopic(
                admin_pb2.TopicRequest(topic=topic),
                timeout=10,
                metadata=(("authorization", f"Bearer {keys.token('alice')}"),),
            )
        assert raised.value.code() == grpc.StatusCode.PERMISSION_DENIED
        created = admin.CreateTopic(
            admin_pb2.TopicRequest(topic=topic),
            timeout=10,
            metadata=(("authorization", f"Bearer {keys.token(SUPERUSER)}"),),
        )
        assert created.created
    assert topic_exists(auth_broker, keys, topic)


def test_a_role_without_permission_is_denied_and_nothing_is_written(auth_broker, keys, superuser):
    topic = unique("denied")
    superuser.create_producer(topic).send(b"first")
    before = superuser.get_last_message_id(topic)
    with client_for(auth_broker, keys.token("mallory")) as mallory:
        with pytest.raises(AuthorizationError, match="may not produce"):
            mallory.create_producer(topic)
        with pytest.raises(AuthorizationError, match="may not consume"):
            mallory.subscribe(topic, "spy", initial_position=stableline.InitialPosition.Earliest)
        with pytest.raises(AuthorizationError):
            mallory.create_reader(topic).read_next(1000)
    assert superuser.get_last_message_id(topic) == before
    assert subscriptions(auth_broker, keys, topic) == {}


def test_a_namespace_grant_lets_the_role_produce_and_consume(auth_broker, keys):
    role = unique("alice")
    topic = unique("granted")
    grant(auth_broker, keys, "/admin/v2/namespaces/public/default/permissions", role, ["produce"])
    with client_for(auth_broker, keys.token(role)) as alice:
        alice.create_producer(topic).send(b"hello")
        with pytest.raises(AuthorizationError):
            alice.subscribe(topic, "s", initial_position=stableline.InitialPosition.Earliest)
        grant(
            auth_broker,
            keys,
            "/admin/v2/namespaces/public/default/permissions",
            role,
            ["produce", "consume"],
        )
        consumer = alice.subscribe(topic, "s", initial_position=stableline.InitialPosition.Earliest)
        assert consumer.receive(5000).data() == b"hello"
        reader = alice.create_reader(topic)
        assert reader.read_next(5000).data() == b"hello"


def test_a_topic_grant_covers_that_topic_and_no_other(auth_broker, keys):
    role = unique("bob")
    topic, other = unique("mine"), unique("theirs")
    grant(
        auth_broker,
        keys,
        f"/admin/v2/persistent/public/default/{topic}/permissions",
        role,
        ["produce"],
    )
    with client_for(auth_broker, keys.token(role)) as bob:
        bob.create_producer(topic).send(b"ok")
        with pytest.raises(AuthorizationError):
            bob.create_producer(other)
    assert not topic_exists(auth_broker, keys, other)


def test_revoking_a_grant_refuses_the_next_call(auth_broker, keys):
    role = unique("carol")
    topic = unique("revoked")
    path = f"/admin/v2/persistent/public/default/{topic}/permissions"
    grant(auth_broker, keys, path, role, ["produce"])
    with client_for(auth_broker, keys.token(role)) as carol:
        carol.create_producer(topic).send(b"before")
        assert http(auth_broker, "DELETE", f"{path}/{role}", keys.token(SUPERUSER))[0] == 204
        with pytest.raises(AuthorizationError):
            carol.create_producer(topic)


def test_transactions_need_produce_on_the_topics_they_write(auth_broker, keys, superuser):
    role = unique("dave")
    topic = unique("txn")
    with client_for(auth_broker, keys.token(role)) as dave:
        txn = dave.new_transaction()
        with pytest.raises(AuthorizationError):
            dave.create_producer(topic).send(b"x", txn=txn)
        txn.abort()
        grant(
            auth_broker,
            keys,
            f"/admin/v2/persistent/public/default/{topic}/permissions",
            role,
            ["produce"],
        )
        txn = dave.new_transaction()
        dave.create_producer(topic).send(b"committed", txn=txn)
        txn.commit()
    reader = superuser.create_reader(topic)
    assert reader.read_next(5000).data() == b"committed"


def test_expired_and_foreign_tokens_are_unauthenticated(auth_broker, keys):
    secret = keys.secret_key_file.read_bytes()
    expired = jwt.encode({"sub": SUPERUSER, "exp": int(time.time()) - 5}, secret, algorithm="HS256")
    foreign = create_token(SUPERUSER, secret_key=create_secret_key())
    for token, complaint in (
        (expired, "expired"),
        (foreign, "signature"),
        ("nonsense", "not valid"),
    ):
        with (
            client_for(auth_broker, token) as client,
            pytest.raises(AuthenticationError, match=complaint),
        ):
            client.create_producer(unique("bad-token"))


def test_an_rs256_token_is_refused_by_an_hs256_broker(auth_broker, keys):
    with (
        client_for(auth_broker, keys.rs256_token(SUPERUSER)) as client,
        pytest.raises(AuthenticationError, match="HS256"),
    ):
        client.get_last_message_id(unique("rs"))


def test_a_stream_must_open_before_it_is_authorized(auth_broker, keys):
    with grpc.insecure_channel(auth_broker.service_url) as channel:
        produce = broker_pb2_grpc.BrokerStub(channel).Produce
        send = broker_pb2.ProduceRequest(send=broker_pb2.ProducerSend(sequence_id=1, payload=b"x"))
        with pytest.raises(grpc.RpcError) as raised:
            list(
                produce(
                    iter([send]),
                    timeout=10,
                    metadata=(("authorization", f"Bearer {keys.token(SUPERUSER)}"),),
                )
            )
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "'open'" in raised.value.details()


def test_health_needs_no_token(auth_broker):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(auth_broker.service_url) as channel:
        answer = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="stableline.v1.Broker"), timeout=10
        )
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_the_broker_stays_up_after_refusals(auth_broker, superuser):
    assert auth_broker.process.poll() is None
    topic = unique("still-up")
    superuser.create_producer(topic).send(b"fine")
    assert superuser.create_reader(topic).read_next(5000).data() == b"fine"


def test_an_rs256_broker_accepts_tokens_signed_with_the_private_key(tmp_path, keys):
    args = ["--auth-token-public-key", str(keys.public_key_file), "--superuser-roles", SUPERUSER]
    broker = BrokerProcess(tmp_path / "data", extra_args=args)
    broker.start()
    try:
        with client_for(broker, keys.rs256_token(SUPERUSER)) as admin:
            admin.create_producer("rs256").send(b"signed elsewhere")
            assert admin.create_reader("rs256").read_next(5000).data() == b"signed elsewhere"
        with (
            client_for(broker, keys.token(SUPERUSER)) as hs256,
            pytest.raises(AuthenticationError, match="RS256"),
        ):
            hs256.create_producer("rs256")
    finally:
        assert broker.stop() == 0, broker.log()


def test_a_transactions_owner_reads_how_it_ended_without_admin_rights(auth_broker, keys):
    role = unique("erin")
    metadata = (("authorization", f"Bearer {keys.token(role)}"),)
    with client_for(auth_broker, keys.token(role)) as erin:
        txn = erin.new_transaction()
        txn.commit()
        # What a client whose end was lost with its connection asks before it answers:
        # the admin record is refused to this role, the data-plane call is not.
        assert erin._loop.run(txn._inner._recorded_state()) == "COMMITTED"
    txn_id = broker_pb2.TxnId(most_bits=txn.id[0], least_bits=txn.id[1])
    with grpc.insecure_channel(auth_broker.service_url) as channel:
        admin = admin_pb2_grpc.AdminStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            admin.GetTransactionMetadata(
                admin_pb2.TransactionRequest(most_bits=txn.id[0], least_bits=txn.id[1]),
                timeout=10,
                metadata=metadata,
            )
        assert raised.value.code() == grpc.StatusCode.PERMISSION_DENIED
        state = broker_pb2_grpc.BrokerStub(channel).GetTransaction(
            broker_pb2.GetTransactionRequest(txn_id=txn_id), timeout=10, metadata=metadata
        )
        assert state.state == broker_pb2.TXN_STATE_COMMITTED
        with pytest.raises(grpc.RpcError) as raised:
            broker_pb2_grpc.BrokerStub(channel).GetTransaction(
                broker_pb2.GetTransactionRequest(txn_id=txn_id), timeout=10
            )
        assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_reader_with_consume_gets_the_ledgers_and_bounds_without_admin_rights(
    auth_broker, keys, superuser
):
    role = unique("frank")
    topic = unique("plan")
    superuser.create_producer(topic).send(b"x")
    metadata = (("authorization", f"Bearer {keys.token(role)}"),)
    request = broker_pb2.GetLastMessageIdRequest(topic=topic, include_ledgers=True)
    with grpc.insecure_channel(auth_broker.service_url) as channel:
        broker = broker_pb2_grpc.BrokerStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            broker.GetLastMessageId(request, timeout=10, metadata=metadata)
        assert raised.value.code() == grpc.StatusCode.PERMISSION_DENIED
        grant(
            auth_broker,
            keys,
            f"/admin/v2/persistent/public/default/{topic}/permissions",
            role,
            ["consume"],
        )
        layout = broker.GetLastMessageId(request, timeout=10, metadata=metadata)
        assert [(i.entries, i.closed) for i in layout.ledgers] == [(1, False)]
        assert layout.max_read_position == layout.last_confirmed_entry
        # The admin JSON a planner once read stays the admin's.
        with pytest.raises(grpc.RpcError) as raised:
            admin_pb2_grpc.AdminStub(channel).GetInternalStats(
                admin_pb2.TopicRequest(topic=topic), timeout=10, metadata=metadata
            )
        assert raised.value.code() == grpc.StatusCode.PERMISSION_DENIED
