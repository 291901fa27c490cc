"""The dashboard of a broker of a real three-broker cluster, in headless Chromium: the
cluster's brokers, each topic's owner, and links to the owners' own dashboards."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator

import pytest

import stableline
from tests.stableline.broker.http.test_dashboard import (
    _click,
    _count,
    _screenshot,
    _script_errors,
    _text,
    _wait,
)
from tests.stableline.browser import browser_or_skip

from .conftest import Cluster


@pytest.fixture(scope="module")
def driver() -> Iterator:
    browser = browser_or_skip()
    try:
        yield browser
    finally:
        browser.get("about:blank")  # stops polling before the cluster stops
        browser.quit()


def _id(broker) -> str:
    return f"127.0.0.1:{broker.grpc_port}"


def test_a_broker_s_dashboard_shows_the_brokers_and_which_owns_each_topic(cluster: Cluster, driver):
    topics = [f"persistent://public/default/dash-{i}" for i in range(6)]
    with stableline.Client(cluster.brokers[0].service_url) as client:
        owners = {t: client.lookup_topic(t).grpc_address for t in topics}  # places them
        for topic in topics:
            client.create_producer(topic).send(b"x")
    assert set(owners.values()) == {_id(b) for b in cluster.brokers}
    here = cluster.brokers[0]
    driver.get(here.http_url + "/#/brokers")
    _wait(driver, lambda d: _count(d, "#brokers tr[data-broker]") == 3, "the three brokers")
    for broker in cluster.brokers:
        row = f'#brokers tr[data-broker="{_id(broker)}"]'
        assert "live" in _text(driver, row + " td.state")
        assert broker.http_url in _text(driver, row)
    assert "this broker" in _text(driver, f'#brokers tr[data-broker="{_id(here)}"]')
    # Each broker's last load report: msgs/s in and out, CPU, memory.
    for column in ("Msgs in", "Msgs out", "CPU", "Memory"):
        assert column in _text(driver, "table.grid-table thead")
    assert "/s" in _text(driver, f'#brokers tr[data-broker="{_id(here)}"]')
    assert cluster.name in _text(driver, "#cluster-cards")
    _screenshot(driver, "cluster-brokers")

    driver.get(here.http_url + "/#/")
    _wait(
        driver,
        lambda d: all(_count(d, f'#topics-body tr[data-topic="{t}"]') for t in topics),
        "every topic of the cluster",
    )
    assert "Owner" in _text(driver, "#topics thead")
    for topic, owner in owners.items():
        row = f'#topics-body tr[data-topic="{topic}"]'
        assert owner in _text(driver, row + " td.owner")
        if owner == _id(here):
            assert "this broker" in _text(driver, row + " td.owner")
    assert "serves" in _text(driver, "#topics-served")
    _screenshot(driver, "cluster-topics")

    # A topic another broker owns links to its page on that broker's dashboard.
    remote = next(t for t, owner in owners.items() if owner != _id(here))
    owner = cluster.by_id(owners[remote])
    _click(driver, f'#topics-body tr[data-topic="{remote}"] td:first-child a')
    _wait(
        driver,
        lambda d: d.current_url.startswith(owner.http_url) and _count(d, "#topic-cards .card"),
        "the topic's page on its owner's dashboard",
    )
    assert _text(driver, "h1") == remote
    # And its page on a broker that does not own it says where it is served.
    local = urllib.parse.quote(remote.removeprefix("persistent://"), safe="/")
    driver.get(here.http_url + f"/#/topic/{local}")
    _wait(driver, lambda d: owners[remote] in _text(d, "#served-elsewhere"), "the owner notice")
    assert _script_errors(driver) == []
