"""The cluster's brokers and each topic's owner over HTTP, as every one of three real
brokers answers them; a killed broker is listed as down with the topics it leads."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from tests.conftest import wait_until

from .conftest import Cluster, one_copy_namespace


def _get(broker, path: str):
    with urllib.request.urlopen(broker.http_url + path, timeout=10) as response:
        return json.loads(response.read())


def _create(broker, topic: str) -> None:
    """PUT through `broker`, following its redirect to the owner it placed the topic on."""
    url = broker.http_url + "/admin/v2/persistent/" + topic.removeprefix("persistent://")
    try:
        urllib.request.urlopen(
            urllib.request.Request(url, headers={"X-Stableline-Request": "test"}, method="PUT"),
            timeout=10,
        ).close()
    except urllib.error.HTTPError as redirect:
        assert redirect.code == 307, redirect
        owner_url = redirect.headers["Location"]
        urllib.request.urlopen(
            urllib.request.Request(
                owner_url, headers={"X-Stableline-Request": "test"}, method="PUT"
            ),
            timeout=10,
        ).close()


def _id(broker) -> str:
    return f"127.0.0.1:{broker.grpc_port}"


def test_every_broker_lists_the_cluster_s_brokers_and_the_same_owner_of_each_topic(
    cluster: Cluster,
):
    topics = [f"persistent://public/default/http-owned-{i}" for i in range(6)]
    for topic in topics:
        _create(cluster.brokers[0], topic)
    ids = {_id(b) for b in cluster.brokers}
    assert _get(cluster.brokers[1], "/admin/v2/brokers/runtime")["cluster"] == cluster.name
    for broker in cluster.brokers:
        documents = _get(broker, f"/admin/v2/clusters/{cluster.name}/brokers")
        assert {d["brokerId"] for d in documents} == ids
        assert all(d["live"] for d in documents)
        assert [d["brokerId"] for d in documents if d["thisBroker"]] == [_id(broker)]
        by_id = {d["brokerId"]: d for d in documents}
        for other in cluster.brokers:
            assert by_id[_id(other)]["httpUrl"] == other.http_url
            assert by_id[_id(other)]["serviceUrl"] == f"stableline://{_id(other)}"

    def owners(broker) -> dict[str, str]:
        listed = _get(broker, f"/admin/v2/clusters/{cluster.name}/topicOwners")
        return {t: listed.get(t) for t in topics}

    # The records reach the other brokers through their watches.
    wait_until(
        lambda: (
            len({json.dumps(owners(b)) for b in cluster.brokers}) == 1
            and None not in owners(cluster.brokers[2]).values()
        ),
        message="every broker to list every topic's owner",
    )
    listed = owners(cluster.brokers[0])
    assert set(listed.values()) == ids, "placement spread the topics over the three"
    for topic, owner in listed.items():
        looked_up = _get(cluster.brokers[2], "/lookup/v2/topic/" + topic.replace("://", "/", 1))
        assert looked_up["brokerUrl"] == f"stableline://{owner}"


def test_a_killed_broker_is_listed_as_down_with_the_topics_it_leads(cluster: Cluster):
    # One copy: the killed broker keeps leading them (replicated ones move away).
    namespace = one_copy_namespace(cluster.brokers[0])
    topics = [f"persistent://{namespace}/http-down-{i}" for i in range(3)]
    for topic in topics:
        _create(cluster.brokers[0], topic)
    victim = cluster.brokers[2]
    victim_id = _id(victim)
    watcher = cluster.brokers[0]
    path = f"/admin/v2/clusters/{cluster.name}/brokers"
    victim.kill()
    try:
        wait_until(
            lambda: any(d["brokerId"] == victim_id and not d["live"] for d in _get(watcher, path)),
            timeout_s=20,
            message="the killed broker's registration to lapse",
        )
        (down,) = [d for d in _get(watcher, path) if d["brokerId"] == victim_id]
        assert down["goneSinceMs"] is not None and down["httpUrl"] is None
        assert down["ownedTopics"] >= 1
    finally:
        victim.start()
    wait_until(
        lambda: all(d["live"] for d in _get(watcher, path)),
        message="the restarted broker to be listed as live again",
    )
