"""Spark against a broker started with --secure: TLS and a token in the options."""

from __future__ import annotations

import json
import ssl
import urllib.request

import pytest

from stableline.broker.security.tokens import create_token
from stableline.testing import BrokerProcess


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("secure") / "data", extra_args=["--secure"])
    broker.start()
    yield broker
    broker.stop()


def _options(broker, token: str | None = None) -> dict[str, str]:
    security = broker.data_dir / "security"
    options = {
        "service": broker.service_url,  # stableline+ssl://127.0.0.1:port
        "tlsTrustCertsFile": str(security / "ca.pem"),
        "topic": "secured",
    }
    if token is not None:
        options["token"] = token
    return options


def test_a_write_and_a_read_over_tls_with_a_token(spark, secure_broker):
    token = (secure_broker.data_dir / "security" / "admin.token").read_text()
    rows = [(f"v{i}",) for i in range(50)]
    spark.createDataFrame(rows, "value string").write.format("stableline").options(
        **_options(secure_broker, token)
    ).mode("append").save()
    read = spark.read.format("stableline").options(**_options(secure_broker, token)).load()
    assert sorted(bytes(r.value).decode() for r in read.collect()) == sorted(v for (v,) in rows)


def test_without_a_token_the_broker_refuses_and_the_error_says_so(spark, secure_broker):
    read = spark.read.format("stableline").options(**_options(secure_broker)).load()
    with pytest.raises(Exception, match=r"(?i)token|unauthenticated"):
        read.collect()


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"tlsTrustCertsFile": "/nonexistent/ca.pem"}, "tlsTrustCertsFile"),
        ({"token": "  "}, "token"),
        ({"service": "http://127.0.0.1:1"}, "service"),
    ],
)
def test_bad_connection_options_fail_naming_the_option(spark, secure_broker, options, named):
    read = spark.read.format("stableline").options(**{**_options(secure_broker), **options})
    with pytest.raises(Exception, match=named):
        read.load().collect()


def test_a_role_granted_only_consume_reads_a_topic(spark, secure_broker):
    """Planning reads the topic's ledgers and bound over the data plane, so a reader
    needs `consume` on the topic, not admin rights."""
    security = secure_broker.data_dir / "security"
    admin_token = (security / "admin.token").read_text()
    options = {**_options(secure_broker, admin_token), "topic": "consume-only"}
    rows = [(f"r{i}",) for i in range(20)]
    spark.createDataFrame(rows, "value string").write.format("stableline").options(**options).mode(
        "append"
    ).save()
    reader_token = create_token("spark-reader", secret_key=(security / "secret.key").read_bytes())
    grant = urllib.request.Request(
        f"{secure_broker.http_url}/admin/v2/persistent/public/default/consume-only"
        "/permissions/spark-reader",
        data=json.dumps(["consume"]).encode(),
        headers={"Authorization": f"Bearer {admin_token}", "Content-Type": "application/json"},
        method="POST",
    )
    context = ssl.create_default_context(cafile=str(security / "ca.pem"))
    with urllib.request.urlopen(grant, timeout=10, context=context) as response:
        assert response.status == 204
    read = spark.read.format("stableline").options(**{**options, "token": reader_token}).load()
    assert sorted(bytes(r.value).decode() for r in read.collect()) == sorted(v for (v,) in rows)
