"""scripts/fuzz/fuzz_kafka.py, a bounded run: a few hundred random and damaged Kafka
requests against a real broker's Kafka port, which must answer each well-formed one,
answer or close on the rest, stay up, and lose nothing (the default run sends 5,000)."""

from __future__ import annotations

import json

import pytest

from stableline.broker.kafka.protocol import messages as m

REQUESTS = 400
SEED = 21


@pytest.mark.slow
def test_fuzzed_kafka_requests_leave_the_broker_serving_with_nothing_lost(tmp_path, run_script):
    summary_path = tmp_path / "fuzz.json"
    run_script(
        "fuzz/fuzz_kafka.py",
        "--requests",
        REQUESTS,
        "--seed",
        SEED,
        "--json",
        summary_path,
        timeout=180,
    )
    summary = json.loads(summary_path.read_text())
    assert summary["violations"] == 0
    assert summary["requests"] >= REQUESTS
    assert {int(key) for key in summary["served"]} == set(m.SUPPORTED)
    outcomes = summary["outcomes"]
    # Every served API was sent well formed and answered.
    for key in m.SUPPORTED:
        assert outcomes.get(f"valid {int(key)}", {}).get("answered", 0) > 0, key
    # The damage reached the parser: some were answered, some closed their connection.
    damaged = {o for kind, counts in outcomes.items() if kind.startswith("damaged") for o in counts}
    assert {"answered", "closed"} <= damaged
    assert outcomes["bad size"] == {"closed": outcomes["bad size"]["closed"]}
    assert summary["workload"]["consumed"] == summary["workload"]["produced"] > 0


@pytest.mark.slow
def test_secure_fuzzing_goes_over_sasl_ssl_and_unauthenticated_requests_are_closed(
    tmp_path, run_script
):
    summary_path = tmp_path / "fuzz.json"
    run_script(
        "fuzz/fuzz_kafka.py", "--secure", "--requests", 200, "--seed", SEED, "--json", summary_path,
        timeout=180,
    )  # fmt: skip
    summary = json.loads(summary_path.read_text())
    assert summary["violations"] == 0
    unauthenticated = {
        kind: counts for kind, counts in summary["outcomes"].items() if kind.startswith("unauth")
    }
    assert unauthenticated, "some requests went without authentication"
    for kind, counts in unauthenticated.items():
        api_key = int(kind.split()[-1])
        if api_key not in (
            m.ApiKey.API_VERSIONS,
            m.ApiKey.SASL_HANDSHAKE,
            m.ApiKey.SASL_AUTHENTICATE,
        ):
            assert set(counts) == {"closed"}, kind
    assert summary["workload"]["consumed"] == summary["workload"]["produced"] > 0
