"""scripts/fuzz.py, a bounded run: a few hundred fuzzed requests of every RPC against a
real broker, which must answer each with a proper status, stay up, and then serve a
normal workload whole (the default run sends 10,000)."""

from __future__ import annotations

import json

import pytest

REQUESTS = 400
SEED = 11
EVERY_RPC = {
    "Admin.CreateTopic",
    "Admin.DeleteTopic",
    "Admin.GetInternalStats",
    "Admin.GetStats",
    "Admin.GetTransactionBufferStats",
    "Admin.GetTransactionMetadata",
    "Admin.ListTopics",
    "Broker.EndTransaction",
    "Broker.Fetch",
    "Broker.GetLastMessageId",
    "Broker.GetTransaction",
    "Broker.NewTransaction",
    "Broker.Produce",
    "Broker.Subscribe",
}


@pytest.mark.slow
def test_fuzzed_requests_get_proper_statuses_and_leave_the_broker_serving(tmp_path, run_script):
    summary_path = tmp_path / "fuzz.json"
    run_script(
        "fuzz.py", "--requests", REQUESTS, "--seed", SEED, "--json", summary_path, timeout=120
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
