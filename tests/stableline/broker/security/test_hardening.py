"""What a broker keeps to itself: a guessable HS256 key stops the start, the data dir
is the broker's only (0700 / 0600), /metrics can require a token
(authenticate_metrics_endpoint). Internal errors as ids: tests/stableline/test_errors.py."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

import stableline
from stableline import AuthenticationToken
from stableline.testing import BrokerExited, BrokerProcess

from .conftest import SUPERUSER, http, token_args


def test_a_one_byte_hs256_key_stops_the_start_naming_the_key_file(tmp_path):
    weak = tmp_path / "weak.key"
    weak.write_bytes(b"k")
    broker = BrokerProcess(
        tmp_path / "data",
        extra_args=["--auth-token-secret-key", str(weak), "--superuser-roles", SUPERUSER],
    )
    with pytest.raises(BrokerExited) as exited:
        broker.start()
    assert exited.value.returncode == 2
    message = str(exited.value)
    assert f"secret key file {weak} holds a 1-byte key; HS256 needs at least 32" in message


def _loose_modes(data_dir: Path) -> list[str]:
    """Every file or directory under data_dir that group or others may use."""
    loose = []
    for root, directories, files in os.walk(data_dir):
        for name in [*directories, *files, "."]:
            path = Path(root, name)
            mode = stat.S_IMODE(path.lstat().st_mode)
            if mode & 0o077:
                loose.append(f"{path.relative_to(data_dir)} {mode:o}")
    return loose


def test_the_data_dir_is_the_brokers_own_and_older_files_are_tightened(tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o755)
    os.chmod(data_dir, 0o755)
    (data_dir / "left-by-an-older-version").write_bytes(b"x")
    os.chmod(data_dir / "left-by-an-older-version", 0o644)
    broker = BrokerProcess(data_dir, extra_args=["--secure"])
    broker.start()
    try:
        security = data_dir / "security"
        token = (security / "admin.token").read_text().strip()
        with stableline.Client(
            broker.service_url,
            tls_trust_certs_file_path=security / "ca.pem",
            authentication=AuthenticationToken(token),
        ) as client:
            client.create_producer("modes").send(b"kept private")
        broker.stop()
        loose = _loose_modes(data_dir)
        assert not loose, loose
        assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
        ledgers = list((data_dir / "ledgers").rglob("*.log"))
        assert ledgers and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in ledgers)
        # A restart finds it so and changes nothing more.
        broker.start()
        assert "took group and other permissions off" not in broker.log()
    finally:
        broker.stop()


def test_files_deep_in_the_data_dir_are_tightened_after_the_start(tmp_path, wait):
    data_dir = tmp_path / "data"
    broker = BrokerProcess(data_dir)
    broker.start()
    with stableline.Client(broker.service_url) as client:
        client.create_producer("deep").send(b"x")
    broker.stop()
    # As a restore with another umask would leave them: the top stays 0700.
    topic_dir = data_dir / "ledgers" / "public" / "default" / "deep"
    loosened = [topic_dir, *topic_dir.iterdir()]
    for path in loosened:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    broker.start()
    try:
        # The walk chmods first and logs after, so the log line is what marks it done.
        done = "took group and other permissions off"
        wait(lambda: done in broker.log(), 10.0, "the walk to tighten every file")
        assert not _loose_modes(data_dir)
        assert f"{done} 3 files and directories" in broker.log()
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def metrics_by_token_broker(tmp_path_factory, keys):
    directory = tmp_path_factory.mktemp("metrics-auth")
    config = directory / "broker.toml"
    config.write_text("authenticate_metrics_endpoint = true\n")
    process = BrokerProcess(
        directory / "data", extra_args=[*token_args(keys), "--config", str(config)]
    )
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log()


def test_metrics_need_a_valid_token_of_any_role_when_configured(metrics_by_token_broker, keys):
    broker = metrics_by_token_broker
    status, _body = http(broker, "GET", "/metrics")
    assert status == 401
    assert http(broker, "GET", "/metrics", "not-a-token")[0] == 401
    status, body = http(broker, "GET", "/metrics", keys.token("scraper"))  # no grant needed
    assert status == 200 and b"stableline_topics" in body
    assert http(broker, "GET", "/admin/v2/brokers/health") == (200, b"ok")  # still open


def test_authenticate_metrics_endpoint_without_authentication_is_refused(tmp_path):
    config = tmp_path / "broker.toml"
    config.write_text("authenticate_metrics_endpoint = true\n")
    broker = BrokerProcess(tmp_path / "data", extra_args=["--config", str(config)])
    with pytest.raises(BrokerExited) as exited:
        broker.start()
    assert "authenticate_metrics_endpoint needs authentication_enabled" in str(exited.value)
