"""The cluster's brokers and topic owners over HTTP, on a standalone broker: the
cluster is that broker, which owns every topic (tests/cluster has three brokers)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest


def _get(broker, path: str):
    with urllib.request.urlopen(broker.http_url + path, timeout=10) as response:
        return json.loads(response.read())


def _put(broker, path: str) -> None:
    request = urllib.request.Request(
        broker.http_url + path, headers={"X-Stableline-Request": "test"}, method="PUT"
    )
    urllib.request.urlopen(request, timeout=10).close()


def test_standalone_the_cluster_is_this_broker_and_it_owns_every_topic(broker):
    for name in ("a", "b"):
        _put(broker, f"/admin/v2/persistent/public/default/{name}")
    cluster = _get(broker, "/admin/v2/brokers/runtime")["cluster"]
    assert cluster == "standalone"
    broker_id = f"127.0.0.1:{broker.grpc_port}"

    (only,) = _get(broker, f"/admin/v2/clusters/{cluster}/brokers")
    assert only["brokerId"] == broker_id
    assert only["serviceUrl"] == f"stableline://{broker_id}"
    assert only["httpUrl"] == broker.http_url
    assert only["live"] and only["thisBroker"] and only["goneSinceMs"] is None
    assert only["ownedTopics"] == 2
    assert only["pid"] == broker.process.pid

    assert _get(broker, f"/admin/v2/clusters/{cluster}/topicOwners") == {
        "persistent://public/default/a": broker_id,
        "persistent://public/default/b": broker_id,
    }


@pytest.mark.parametrize("document", ["brokers", "topicOwners"])
def test_another_cluster_is_not_answered_here(broker, document):
    with pytest.raises(urllib.error.HTTPError) as refused:
        _get(broker, f"/admin/v2/clusters/elsewhere/{document}")
    assert refused.value.code == 404
    assert "this broker is in cluster standalone" in json.loads(refused.value.read())["reason"]


def test_standalone_the_load_reports_are_this_brokers(broker):
    _put(broker, "/admin/v2/persistent/public/default/reported")
    (only,) = _get(broker, "/admin/v2/brokers/load")
    assert only["brokerId"] == f"127.0.0.1:{broker.grpc_port}" and only["thisBroker"]
    load = only["load"]
    for figure in ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut", "cpu"):
        assert load[figure] >= 0
    assert load["rssBytes"] > 0 and load["reportedAtMs"] > 0
    assert isinstance(only["busiestTopics"], dict)
