"""scripts/bench/bench_rereplication.py at toy sizes on a real etcd and three real
brokers: the copy is made, at no more than the throttle allows, and both client runs
are measured."""

from __future__ import annotations

import json

import pytest

from tests.metadata.conftest import _find_etcd


@pytest.mark.slow
def test_quick_run_copies_within_the_throttle_and_measures_the_clients(tmp_path, run_script):
    if _find_etcd() is None:
        pytest.skip("no etcd on PATH")
    out = tmp_path / "rereplication.json"
    run_script(
        "bench/bench_rereplication.py",
        "--rate-mb", 2, "--fill-mb", 6, "--fill-seconds", 1, "--seconds", 0.5,
        "--dir", tmp_path, "--json", out,
        timeout=300,
    )  # fmt: skip
    result = json.loads(out.read_text())
    assert result["etcd"] is True
    assert result["copied_bytes"] > 0
    # The throttle's burst is one second's worth: beyond it, its rate bounds the copy.
    limit_mb_per_s = result["rate_limit_bytes_per_s"] / 1e6
    allowed = limit_mb_per_s * (1 + 1 / max(result["copy_seconds"], 1e-3))
    assert result["copy_mb_per_s"] <= allowed, result
    assert result["client_msgs_per_s_alone"] > 0
    assert result["client_msgs_per_s_during"] > 0
