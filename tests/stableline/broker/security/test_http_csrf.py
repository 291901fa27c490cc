"""State-changing HTTP admin calls need a JSON content type or the
X-Stableline-Request header, so a page on another site cannot make an operator's
browser send them (a form's text/plain POST, a no-cors fetch); security is off here,
as by default."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from stableline import InitialPosition

SUBSCRIPTION = "/admin/v2/persistent/public/default/drained/subscription/audit"
POLICY = "/admin/v2/namespaces/public/default/autoTopicCreation"


def _call(broker, method: str, path: str, data: bytes | None = None, **headers: str):
    request = urllib.request.Request(
        broker.http_url + path, data, {k.replace("_", "-"): v for k, v in headers.items()},
        method=method,
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _backlog(broker) -> int:
    with urllib.request.urlopen(
        broker.http_url + "/admin/v2/persistent/public/default/drained/stats", timeout=10
    ) as response:
        return json.load(response)["subscriptions"]["audit"]["msgBacklog"]


def test_a_text_plain_post_cannot_drain_a_subscription(broker, client):
    consumer = client.subscribe("drained", "audit", initial_position=InitialPosition.Earliest)
    consumer.close()
    producer = client.create_producer("drained")
    for i in range(3):
        producer.send(b"%d" % i)
    # What <form enctype="text/plain" method="post"> on any site sends.
    status, body = _call(
        broker, "POST", SUBSCRIPTION + "/skip_all", b"x=y", Content_Type="text/plain"
    )
    assert status == 415 and b"X-Stableline-Request" in body
    # What fetch(url, {method: "POST", mode: "no-cors"}) sends: no content type.
    status, body = _call(broker, "POST", SUBSCRIPTION + "/skip_all")
    assert status == 403 and b"application/json" in body
    status, _ = _call(
        broker, "POST", SUBSCRIPTION + "/skip_all", b"a=b",
        Content_Type="application/x-www-form-urlencoded",
    )  # fmt: skip
    assert status == 415
    assert _backlog(broker) == 3
    # The header, or a JSON content type, is what a program sends.
    assert _call(broker, "POST", SUBSCRIPTION + "/skip_all", X_Stableline_Request="1")[0] == 200
    assert _backlog(broker) == 0


def test_a_form_cannot_turn_off_auto_topic_creation_but_json_can(broker):
    body = json.dumps({"allowAutoTopicCreation": False, "topicType": "non-partitioned"})
    status, _ = _call(broker, "POST", POLICY, body.encode(), Content_Type="text/plain")
    assert status == 415
    assert json.loads(_call(broker, "GET", POLICY)[1]) is None
    status, _ = _call(
        broker, "POST", POLICY, body.encode(), Content_Type="application/json; charset=utf-8"
    )
    assert status == 204
    assert json.loads(_call(broker, "GET", POLICY)[1])["allowAutoTopicCreation"] is False
    assert _call(broker, "DELETE", POLICY)[0] == 403
    assert _call(broker, "DELETE", POLICY, X_Stableline_Request="1")[0] == 204


def test_put_and_delete_need_it_too_and_reads_do_not(broker):
    topic = "/admin/v2/persistent/public/default/made"
    assert _call(broker, "PUT", topic)[0] == 403
    assert _call(broker, "PUT", topic, X_Stableline_Request="1")[0] == 204
    assert _call(broker, "GET", "/admin/v2/persistent/public/default")[0] == 200
    assert _call(broker, "DELETE", topic, b"", Content_Type="text/plain")[0] == 415
    assert _call(broker, "DELETE", topic, Content_Type="application/json")[0] == 204
