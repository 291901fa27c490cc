"""Subscription and producer names are checked before anything is written."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

import stableline
from stableline import InitialPosition
from stableline.names import MAX_NAME_BYTES, InvalidNameError, check_name

TOO_LONG = "s" * 600
BAD_NAMES = ["", TOO_LONG, "é" * 128, "a/b", "tab\there", "nul\x00"]


@pytest.mark.parametrize("name", ["sub", "perf-sub-0", "é" * 127, "s" * MAX_NAME_BYTES])
def test_names_within_the_rule_pass(name):
    assert check_name("subscription", name) == name


@pytest.mark.parametrize("name", BAD_NAMES)
def test_names_outside_the_rule_say_the_rule(name):
    with pytest.raises(InvalidNameError, match="1 to 255 bytes of UTF-8"):
        check_name("subscription", name)


def subscriptions(broker, topic: str) -> list[str]:
    return broker.admin(f"/admin/v2/persistent/public/default/{topic}/subscriptions")


def test_a_long_subscription_name_is_refused_and_acks_and_restarts_go_on(broker, client):
    producer = client.create_producer("names")
    good = client.subscribe("names", "good", initial_position=InitialPosition.Earliest)
    with pytest.raises(stableline.InvalidArgument, match="255 bytes"):
        client.subscribe("names", TOO_LONG, initial_position=InitialPosition.Earliest)
    assert TOO_LONG not in str(subscriptions(broker, "names"))
    producer.send(b"one")
    message = good.receive(timeout_millis=5000)
    good.acknowledge(message)  # acks still answer
    stats = broker.admin("/admin/v2/persistent/public/default/names/stats")
    assert list(stats["subscriptions"]) == ["good"]


def test_a_long_producer_name_is_refused(broker, client):
    with pytest.raises(stableline.InvalidArgument, match="producer name"):
        client.create_producer("names-p", producer_name=TOO_LONG)
    assert client.create_producer("names-p", producer_name="fine").send(b"x").entry_id == 0


def test_http_create_subscription_refuses_a_long_name(broker, client):
    client.create_producer("names-h").send(b"x")
    path = f"/admin/v2/persistent/public/default/names-h/subscription/{TOO_LONG}"
    request = urllib.request.Request(
        broker.http_url + path, headers={"X-Stableline-Request": "test"}, method="PUT"
    )
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=10)
    assert raised.value.code == 400
    assert b"255 bytes" in raised.value.read()
    assert subscriptions(broker, "names-h") == []
