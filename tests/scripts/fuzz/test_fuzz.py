"""scripts/fuzz/fuzz.py, a bounded run: a few hundred fuzzed requests of every RPC against a
real broker, which must answer each with a proper status, stay up, and then serve a
normal workload whole (the default run sends 10,000)."""

from __future__ import annotations

import json

import pytest

from stableline._proto import admin_pb2, broker_pb2

REQUESTS = 400
SEED = 11
# Every method of both services, as the proto declares them: an RPC added later is
# fuzzed, and checked here, without anyone listing it.
EVERY_RPC = {
    f"{service.name}.{method.name}"
    for service in (
        broker_pb2.DESCRIPTOR.services_by_name["Broker"],
        admin_pb2.DESCRIPTOR.services_by_name["Admin"],
    )
    for method in service.methods
}


@pytest.mark.slow
def test_fuzzed_requests_get_proper_statuses_and_leave_the_broker_serving(tmp_path, run_script):
    summary_path = tmp_path / "fuzz.json"
    run_script(
        "fuzz/fuzz.py", "--requests", REQUESTS, "--seed", SEED, "--json", summary_path, timeout=120
    )
    summary = json.loads(summary_path.read_text())
    assert summary["violations"] == 0
    assert summary["requests"] >= REQUESTS
    assert set(summary["statuses"]) == EVERY_RPC
    statuses = {code for counts in summary["statuses"].values() for code in counts}
    assert not statuses & {"UNKNOWN", "INTERNAL"}
    # Fuzzing reached past the first checks: refusals and successes both.
    assert {"OK", "INVALID_ARGUMENT", "NOT_FOUND"} <= statuses
    assert summary["workload"]["consumed"] == summary["workload"]["produced"] > 0


def test_secure_mode_refuses_streams_without_a_valid_token_and_keeps_slots_for_the_rest(
    tmp_path, run_script
):
    """--secure: the fuzzing goes with a superuser token over TLS, then idle streams
    without a valid token are all refused or ended as idle, while authenticated
    producers fill every slot (one more is refused) and the broker stays up."""
    summary_path = tmp_path / "fuzz.json"
    run_script(
        "fuzz/fuzz.py",
        "--secure",
        "--requests",
        60,
        "--seed",
        SEED,
        "--json",
        summary_path,
        timeout=120,
    )
    summary = json.loads(summary_path.read_text())
    assert summary["violations"] == 0
    statuses = {code for counts in summary["statuses"].values() for code in counts}
    # The fuzzed requests reached past the token check.
    assert "OK" in statuses and "UNAUTHENTICATED" not in statuses
    idle = summary["idle_streams"]
    assert {"none, silent", "garbage, opening", "other-key, opening", "expired, silent"} <= set(
        idle["ended"]
    )
    for shape, codes in idle["ended"].items():
        assert set(codes) <= {"UNAUTHENTICATED", "DEADLINE_EXCEEDED"}, shape
        if shape.endswith("opening"):
            assert set(codes) == {"UNAUTHENTICATED"}, shape
    assert idle["authenticated_slots"] >= 2 and idle["over_limit"] == "RESOURCE_EXHAUSTED"
    assert summary["workload"]["consumed"] == summary["workload"]["produced"] > 0
