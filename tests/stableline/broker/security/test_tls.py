"""TLS on both ports: TLS clients round-trip, plaintext clients are refused, and with
a client CA only clients holding a certificate it signed get in."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.client import HTTPException

import pytest

import stableline
from stableline import AuthenticationError, AuthenticationToken, BrokerUnavailable
from stableline.testing import BrokerProcess

from .conftest import Pki, http, tls_args

REFUSED = (urllib.error.URLError, HTTPException, ConnectionError, ssl.SSLError)


def started(directory, args: list[str]) -> Iterator[BrokerProcess]:
    process = BrokerProcess(directory / "data", extra_args=args)
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log()


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory, pki: Pki) -> Iterator[BrokerProcess]:
    yield from started(tmp_path_factory.mktemp("tls"), tls_args(pki))


@pytest.fixture(scope="module")
def mtls_broker(tmp_path_factory, pki: Pki) -> Iterator[BrokerProcess]:
    args = [*tls_args(pki), "--tls-client-ca", str(pki.ca_file)]
    yield from started(tmp_path_factory.mktemp("mtls"), args)


def round_trip(client: stableline.Client, topic: str) -> bytes:
    client.create_producer(topic).send(b"over tls")
    return client.create_reader(topic).read_next(5000).data()


def test_a_tls_client_round_trips_a_message(tls_broker, pki):
    assert tls_broker.tls and tls_broker.service_url.startswith("stableline+ssl://")
    with stableline.Client(tls_broker.service_url, tls_trust_certs_file_path=pki.ca_file) as client:
        assert round_trip(client, "tls-round-trip") == b"over tls"


def test_a_plaintext_client_is_refused_with_a_hint_about_tls(tls_broker, pki):
    plaintext_url = f"127.0.0.1:{tls_broker.grpc_port}"
    with (
        stableline.Client(plaintext_url, operation_timeout_seconds=5) as client,
        pytest.raises(BrokerUnavailable, match=r"stableline\+ssl://"),
    ):
        client.create_producer("never-written")
    with (
        stableline.Client(tls_broker.service_url, tls_trust_certs_file_path=pki.ca_file) as client,
        pytest.raises(stableline.TopicNotFound),
    ):
        client.get_last_message_id("never-written")


def test_a_client_that_does_not_trust_the_brokers_ca_is_refused(tls_broker):
    # No trust file: the system's roots, which never signed the test CA.
    with (
        stableline.Client(tls_broker.service_url) as client,
        pytest.raises(BrokerUnavailable, match="tls_trust_certs_file_path"),
    ):
        client.get_last_message_id("anything")


def test_the_http_admin_serves_https_only(tls_broker, pki):
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    assert http(tls_broker, "GET", "/admin/v2/brokers/health", context=context) == (200, b"ok")
    plain = f"http://127.0.0.1:{tls_broker.http_port}/admin/v2/brokers/health"
    with pytest.raises(REFUSED):
        urllib.request.urlopen(plain, timeout=10).read()


def test_client_certificates_are_required_when_a_client_ca_is_set(mtls_broker, pki):
    url = mtls_broker.service_url
    with (
        stableline.Client(url, tls_trust_certs_file_path=pki.ca_file) as anonymous,
        pytest.raises(BrokerUnavailable),
    ):
        anonymous.create_producer("mtls")
    with (
        stableline.Client(
            url,
            tls_trust_certs_file_path=pki.ca_file,
            tls_certificate_file_path=pki.stranger_cert_file,
            tls_private_key_file_path=pki.stranger_key_file,
        ) as stranger,
        pytest.raises(BrokerUnavailable),
    ):
        stranger.create_producer("mtls")
    with stableline.Client(
        url,
        tls_trust_certs_file_path=pki.ca_file,
        tls_certificate_file_path=pki.client_cert_file,
        tls_private_key_file_path=pki.client_key_file,
    ) as trusted:
        assert round_trip(trusted, "mtls") == b"over tls"


def test_https_admin_requires_the_client_certificate_too(mtls_broker, pki):
    without = ssl.create_default_context(cafile=str(pki.ca_file))
    with pytest.raises(REFUSED):
        http(mtls_broker, "GET", "/admin/v2/brokers/health", context=without)
    with_cert = ssl.create_default_context(cafile=str(pki.ca_file))
    with_cert.load_cert_chain(pki.client_cert_file, pki.client_key_file)
    assert http(mtls_broker, "GET", "/admin/v2/brokers/health", context=with_cert) == (200, b"ok")


def test_serve_secure_turns_everything_on_with_one_flag(tmp_path):
    broker = BrokerProcess(tmp_path / "data", extra_args=["--secure"])
    broker.start()
    try:
        security = broker.data_dir / "security"
        ca_file, token = security / "ca.pem", (security / "admin.token").read_text()
        assert broker.tls
        assert (security / "secret.key").stat().st_mode & 0o077 == 0
        with (
            stableline.Client(broker.service_url, tls_trust_certs_file_path=ca_file) as anonymous,
            pytest.raises(AuthenticationError),
        ):
            anonymous.create_producer("secured")
        with stableline.Client(
            broker.service_url,
            tls_trust_certs_file_path=ca_file,
            authentication=AuthenticationToken(token),
        ) as admin:
            assert round_trip(admin, "secured") == b"over tls"
        # A restart reuses what the first start made: the same CA and token still work.
        broker.restart()
        with stableline.Client(
            broker.service_url,
            tls_trust_certs_file_path=ca_file,
            authentication=AuthenticationToken(lambda: (security / "admin.token").read_text()),
        ) as admin:
            assert admin.create_reader("secured").read_next(5000).data() == b"over tls"
    finally:
        assert broker.stop() == 0, broker.log()
