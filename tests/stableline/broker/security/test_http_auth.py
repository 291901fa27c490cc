"""The HTTP admin with authentication on: 401 without a token, 403 for non-superusers,
permission endpoints on Pulsar's paths, and grants that survive a restart."""

from __future__ import annotations

import pytest

import stableline
from stableline import AuthenticationToken, AuthorizationError
from stableline.testing import BrokerProcess

from .conftest import SUPERUSER, http, token_args

NAMESPACE_PERMISSIONS = "/admin/v2/namespaces/public/default/permissions"


def test_admin_paths_need_a_valid_token(auth_broker, keys):
    for path in ("/admin/v2/persistent/public/default", NAMESPACE_PERMISSIONS):
        status, body = http(auth_broker, "GET", path)
        assert status == 401, path
        assert "Bearer" in body["reason"]
    status, body = http(auth_broker, "GET", NAMESPACE_PERMISSIONS, token="forged.token.here")
    assert status == 401


def test_admin_paths_are_forbidden_to_roles_that_are_not_superusers(auth_broker, keys):
    status, body = http(
        auth_broker, "PUT", "/admin/v2/persistent/public/default/x", keys.token("alice")
    )
    assert status == 403
    assert "superuser" in body["reason"]
    status, _ = http(
        auth_broker, "POST", NAMESPACE_PERMISSIONS + "/alice", keys.token("alice"), ["produce"]
    )
    assert status == 403
    status, names = http(
        auth_broker, "GET", "/admin/v2/persistent/public/default", keys.token(SUPERUSER)
    )
    assert status == 200
    assert "persistent://public/default/x" not in names


def test_health_and_metrics_stay_open(auth_broker):
    assert http(auth_broker, "GET", "/admin/v2/brokers/health") == (200, b"ok")
    assert http(auth_broker, "GET", "/metrics")[0] == 200


def test_the_dashboard_page_loads_and_asks_for_a_token_through_the_api(auth_broker):
    # The page and its assets hold no data; what they show comes from the admin API,
    # which still wants a token.
    status, page = http(auth_broker, "GET", "/")
    assert status == 200 and b"<html" in page.lower()
    assert http(auth_broker, "GET", "/dashboard/static/app.js")[0] == 200
    assert http(auth_broker, "GET", "/admin/v2/broker-stats/topics")[0] == 401


def test_permissions_are_granted_listed_and_revoked_on_pulsars_paths(auth_broker, keys):
    admin = keys.token(SUPERUSER)
    topic_path = "/admin/v2/persistent/acme/shop/orders/permissions"
    assert (
        http(
            auth_broker,
            "POST",
            "/admin/v2/namespaces/acme/shop/permissions/ana",
            admin,
            ["produce"],
        )[0]
        == 204
    )
    assert http(auth_broker, "POST", topic_path + "/ana", admin, ["consume"])[0] == 204
    assert http(auth_broker, "POST", topic_path + "/ben", admin, ["consume"])[0] == 204
    assert http(auth_broker, "GET", "/admin/v2/namespaces/acme/shop/permissions", admin) == (
        200,
        {"ana": ["produce"]},
    )
    assert http(auth_broker, "GET", topic_path, admin) == (
        200,
        {"ana": ["consume", "produce"], "ben": ["consume"]},
    )
    assert http(auth_broker, "DELETE", topic_path + "/ben", admin)[0] == 204
    assert http(auth_broker, "GET", topic_path, admin) == (200, {"ana": ["consume", "produce"]})


@pytest.mark.parametrize(
    "body",
    [["produce", "admin"], ["fly"], "produce", {"produce": True}],
)
def test_bad_grants_are_refused_with_a_reason(auth_broker, keys, body):
    status, answer = http(
        auth_broker, "POST", NAMESPACE_PERMISSIONS + "/alice", keys.token(SUPERUSER), body
    )
    assert status == 400
    assert "action" in answer["reason"]
    assert http(auth_broker, "GET", NAMESPACE_PERMISSIONS, keys.token(SUPERUSER)) == (200, {})


def test_a_body_that_is_not_json_is_refused(auth_broker, keys):
    import urllib.request

    request = urllib.request.Request(
        auth_broker.http_url + NAMESPACE_PERMISSIONS + "/alice",
        data=b"produce,consume",
        headers={
            "Authorization": f"Bearer {keys.token(SUPERUSER)}",
            "Content-Type": "application/json",
        },
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=10)
    assert raised.value.code == 400


def test_grants_survive_a_restart(tmp_path, keys):
    broker = BrokerProcess(tmp_path / "data", extra_args=token_args(keys))
    broker.start()
    try:
        admin = keys.token(SUPERUSER)
        assert http(broker, "POST", NAMESPACE_PERMISSIONS + "/erin", admin, ["produce"])[0] == 204
        broker.kill()  # no clean shutdown: the grant was made durable before it was answered
        broker.start()
        assert http(broker, "GET", NAMESPACE_PERMISSIONS, admin) == (200, {"erin": ["produce"]})
        with stableline.Client(
            broker.service_url, authentication=AuthenticationToken(keys.token("erin"))
        ) as erin:
            erin.create_producer("after-restart").send(b"still allowed")
            with pytest.raises(AuthorizationError):
                erin.subscribe("after-restart", "s")
    finally:
        assert broker.stop() in (0, -9), broker.log()


def test_subscription_operations_need_consume_on_the_topic_as_in_pulsar(auth_broker, keys):
    admin, reader = keys.token(SUPERUSER), keys.token("sub-reader")
    topic = "/admin/v2/persistent/public/default/sub-rights"
    assert http(auth_broker, "PUT", topic, admin)[0] == 204
    one = topic + "/subscription/audit"
    calls = [
        ("PUT", one + "?isolationLevel=READ_UNCOMMITTED&initialPosition=earliest", None, 204),
        ("GET", topic + "/subscriptions", None, 200),
        ("POST", one + "/skip/1", None, 200),
        ("POST", one + "/skip_all", None, 200),
        ("POST", one + "/resetcursor/0", None, 204),
        ("POST", one + "/resetcursor", {"ledgerId": -1, "entryId": -1}, 204),
        ("GET", one + "/peek", None, 200),
        ("DELETE", one, None, 204),
    ]
    for method, path, body, _ in calls:
        status, answer = http(auth_broker, method, path, reader, body)
        assert status == 403, (method, path)
        assert "consume" in answer["reason"], (method, path)
    status, _ = http(auth_broker, "POST", f"{topic}/permissions/sub-reader", admin, ["consume"])
    assert status == 204
    for method, path, body, expected in calls:
        assert http(auth_broker, method, path, reader, body)[0] == expected, (method, path)
    # Consume on the topic administers nothing else: the topic itself is a superuser's.
    assert http(auth_broker, "DELETE", topic, reader)[0] == 403
    assert http(auth_broker, "GET", topic + "/stats", reader)[0] == 403
    assert (
        http(auth_broker, "GET", "/admin/v2/persistent/public/default/other/subscriptions", reader)[
            0
        ]
        == 403
    )


def test_deleting_a_topic_deletes_its_grants_and_keeps_its_namespaces(auth_broker, keys):
    admin = keys.token(SUPERUSER)
    topic = "/admin/v2/persistent/acme/gone/t"
    namespace = "/admin/v2/namespaces/acme/gone/permissions"
    assert http(auth_broker, "PUT", topic, admin)[0] == 204
    assert (
        http(auth_broker, "POST", topic + "/permissions/topic-role", admin, ["produce"])[0] == 204
    )
    assert http(auth_broker, "POST", namespace + "/ns-role", admin, ["consume"])[0] == 204
    assert http(auth_broker, "DELETE", topic, admin)[0] == 204
    # A topic made again under the name starts without the old topic's grants.
    assert http(auth_broker, "PUT", topic, admin)[0] == 204
    status, grants = http(auth_broker, "GET", topic + "/permissions", admin)
    assert status == 200
    assert grants == {"ns-role": ["consume"]}
    assert http(auth_broker, "GET", namespace, admin)[1] == {"ns-role": ["consume"]}
    with (
        stableline.Client(
            auth_broker.service_url, authentication=AuthenticationToken(keys.token("topic-role"))
        ) as client,
        pytest.raises(AuthorizationError),
    ):
        client.create_producer("persistent://acme/gone/t")


def test_last_message_id_examine_and_position_need_consume_as_pulsars_peek_messages(
    auth_broker, keys
):
    admin, reader = keys.token(SUPERUSER), keys.token("position-reader")
    topic = "/admin/v2/persistent/public/default/position-rights"
    assert http(auth_broker, "PUT", topic, admin)[0] == 204
    one = topic + "/subscription/audit"
    assert http(auth_broker, "PUT", one + "?initialPosition=earliest", admin)[0] == 204
    # An empty subscription has no entry at position 1: 404 once allowed.
    calls = [
        (topic + "/lastMessageId", 200),
        (topic + "/examinemessage?initialPosition=earliest&messagePosition=1", 404),
        (one + "/position/1", 404),
    ]
    for path, _ in calls:
        assert http(auth_broker, "GET", path)[0] == 401, path
        status, answer = http(auth_broker, "GET", path, reader)
        assert status == 403, path
        assert "consume" in answer["reason"], path
    status, _ = http(
        auth_broker, "POST", f"{topic}/permissions/position-reader", admin, ["consume"]
    )
    assert status == 204
    for path, expected in calls:
        assert http(auth_broker, "GET", path, reader)[0] == expected, path
    other = "/admin/v2/persistent/public/default/other/lastMessageId"
    assert http(auth_broker, "GET", other, reader)[0] == 403


def test_transaction_admin_paths_are_a_superusers(auth_broker, keys):
    admin, reader = keys.token(SUPERUSER), keys.token("txn-reader")
    topic = "/admin/v2/persistent/public/default/txn-rights"
    assert http(auth_broker, "PUT", topic, admin)[0] == 204
    assert http(auth_broker, "PUT", topic + "/subscription/audit", admin)[0] == 204
    status, _ = http(auth_broker, "POST", f"{topic}/permissions/txn-reader", admin, ["consume"])
    assert status == 204
    transactions = "/admin/v3/transactions"
    calls = [
        (transactions + "/transactionMetadata/0/999999", 404),
        (transactions + "/slowTransactions/1000", 200),
        (transactions + "/slowTransactions?timeout=1000", 200),
        (transactions + "/pendingAckStats/public/default/txn-rights/audit", 200),
        (transactions + "/coordinatorStats", 200),
    ]
    for path, expected in calls:
        assert http(auth_broker, "GET", path)[0] == 401, path
        # Consume on the topic is not enough: transactions are administration.
        status, answer = http(auth_broker, "GET", path, reader)
        assert status == 403, path
        assert "superuser" in answer["reason"], path
        assert http(auth_broker, "GET", path, admin)[0] == expected, path
