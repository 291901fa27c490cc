"""Shared metadata while the cluster's etcd is away: a broker keeps answering from what
it read, a change is refused at once with a retryable 503 that names etcd, and the
same change goes through once etcd is back."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

import pytest

from stableline.testing import BrokerProcess
from tests.metadata.conftest import (  # noqa: F401 - etcd_binary and own_etcd are fixtures
    ONE_COPY_ENV,
    SHORT_SESSION_TIMEOUT_S,
    etcd_binary,
    own_etcd,
)


def _http(broker: BrokerProcess, method: str, path: str, body: object = None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        broker.http_url + path, data, {"X-Stableline-Request": "test"}, method=method
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    return status, json.loads(raw) if raw else None


@pytest.mark.slow
def test_a_change_with_etcd_away_is_refused_503_and_goes_through_when_it_is_back(
    own_etcd,  # noqa: F811 - the fixture imported above
    tmp_path,
):
    broker = BrokerProcess(
        tmp_path / "broker",
        extra_args=["--metadata-store", own_etcd.url, "--cluster", f"faults{os.getpid()}"],
        # One broker: one copy of each topic.
        env={"STABLELINE_METADATA_SESSION_TIMEOUT_S": str(SHORT_SESSION_TIMEOUT_S), **ONE_COPY_ENV},
    )
    broker.start()
    try:
        grants = "/admin/v2/namespaces/public/default/permissions"
        assert _http(broker, "POST", f"{grants}/alice", ["consume"])[0] == 204
        own_etcd.stop()
        status, body = _http(broker, "POST", f"{grants}/bob", ["produce"])
        assert status == 503, body
        assert "etcd at etcd://127.0.0.1" in body["reason"]
        # What the broker read is still what it answers.
        assert _http(broker, "GET", grants) == (200, {"alice": ["consume"]})
        own_etcd.start()
        assert _http(broker, "POST", f"{grants}/bob", ["produce"])[0] == 204
        assert _http(broker, "GET", grants) == (
            200,
            {"alice": ["consume"], "bob": ["produce"]},
        )
    finally:
        broker.stop()
