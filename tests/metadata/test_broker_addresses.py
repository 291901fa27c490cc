"""Registrations carry only addresses a broker could have."""

from __future__ import annotations

import pytest

from stableline.metadata import BrokerInfo
from stableline.metadata.broker_addresses import (
    InvalidBrokerAddress,
    check_host_port,
    check_http_url,
)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080", "https://broker-1.example.com:8443", "http://[::1]:8080"]
)
def test_http_and_https_urls_of_a_host_and_port_pass(url):
    assert check_http_url("HTTP URL", url) == url


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "JAVASCRIPT://x:1",
        "data:text/html,x",
        "http://user:pw@h:1",
        "http://h:1/path",
        "http://h:1?x",
        "http://h:1#x",
        "http://h",
        "http://h:0",
        "http://h:70000",
        "ftp://h:21",
        "http://h:1\n",
    ],
)
def test_anything_else_is_refused(url):
    with pytest.raises(InvalidBrokerAddress, match="HTTP URL"):
        check_http_url("HTTP URL", url)


@pytest.mark.parametrize("address", ["h", "h:", ":1", "h:1:2x", "h/x:1", "h:99999", "a b:1"])
def test_host_port_is_checked(address):
    with pytest.raises(InvalidBrokerAddress):
        check_host_port("gRPC address", address)


def test_a_registration_with_a_javascript_url_cannot_be_made_nor_read():
    fields = dict(
        broker_id="h:1", grpc_address="h:1", version="v", started_ms=0, hostname="h", pid=1,
        instance="i",
    )  # fmt: skip
    with pytest.raises(InvalidBrokerAddress):
        BrokerInfo(http_url="javascript:alert(1)", **fields)
    good = BrokerInfo(http_url="http://h:2", **fields)
    assert BrokerInfo.from_json(good.to_json()) == good
    with pytest.raises(InvalidBrokerAddress):
        BrokerInfo.from_json(good.to_json().replace(b"http://h:2", b"javascript:x"))
    with pytest.raises(InvalidBrokerAddress):
        BrokerInfo.from_json(b"not json")
