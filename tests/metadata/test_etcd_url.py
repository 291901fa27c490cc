"""etcd:// URLs: endpoints, credentials and TLS options, and what a bad one says."""

from __future__ import annotations

import pytest

from stableline.metadata import InvalidMetadataStoreUrl, open_metadata_store, parse_etcd_url


def test_several_endpoints_credentials_and_tls_files_are_read():
    settings = parse_etcd_url(
        "etcd://broker:p%40ss@etcd-1:2379,[::1]:2380?tls_trust_certs_file=/ca.pem"
        "&tls_cert_file=/c.pem&tls_key_file=/k.pem"
    )
    assert settings.endpoints == (("etcd-1", 2379), ("::1", 2380))
    assert (settings.user, settings.password) == ("broker", "p@ss")
    assert settings.tls and settings.tls_trust_certs_file == "/ca.pem"
    assert settings.redacted == "etcd://broker:***@etcd-1:2379,[::1]:2380"
    assert not parse_etcd_url("etcd://127.0.0.1:2379").tls
    assert parse_etcd_url("etcd://h:1?tls=true").tls


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("etcd://", "names no HOST:PORT"),
        ("etcd://host", "is not HOST:PORT"),
        ("etcd://host:99999", "is not HOST:PORT"),
        ("etcd://user:@host:1", "USER:PASSWORD@"),
        ("etcd://h:1?tls_cert_file=/c", "go together"),
        ("etcd://h:1?colour=blue", "unknown option"),
        ("zk://h:1", "is not etcd://"),
    ],
)
def test_a_malformed_url_says_what_is_wrong(url, says):
    with pytest.raises(InvalidMetadataStoreUrl, match=says):
        parse_etcd_url(url)


async def test_an_unknown_scheme_is_refused_before_anything_opens(tmp_path):
    with pytest.raises(InvalidMetadataStoreUrl, match="unknown scheme"):
        await open_metadata_store("zk://h:2181", embedded_dir=tmp_path)
    assert not any(tmp_path.iterdir())
