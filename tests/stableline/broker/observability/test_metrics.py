"""/metrics (stableline/broker/observability/metrics.py, latency.py) against a real broker:
transaction counters, publish and commit latency histograms, process_* metrics."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def _scrape(broker) -> dict[str, float]:
    """Every sample of one scrape: 'name{label="v",...}' -> value (labels sorted)."""
    with urllib.request.urlopen(broker.http_url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


def test_transaction_counters_count_commits_aborts_and_timeouts(broker, client, wait):
    before = _scrape(broker)
    assert before["stableline_txn_committed_total"] == 0
    assert before["stableline_txn_aborted_total"] == 0
    assert before["stableline_txn_timed_out_total"] == 0
    client.new_transaction().commit()
    client.new_transaction().abort()
    client.new_transaction(timeout_ms=1500)
    assert _scrape(broker)["stableline_txn_open"] == 1
    wait(
        lambda: _scrape(broker)["stableline_txn_timed_out_total"] == 1,
        message="the transaction to time out",
    )
    after = _scrape(broker)
    assert after["stableline_txn_committed_total"] == 1
    # A timeout is an abort too: aborted counts both, timed_out the timeouts alone.
    assert after["stableline_txn_aborted_total"] == 2
    assert after["stableline_txn_open"] == 0


def test_publish_latency_is_observed_once_per_batch(broker, client):
    assert _scrape(broker)["stableline_publish_latency_seconds_count"] == 0
    producer = client.create_producer("timed")
    for i in range(3):
        producer.send(f"m{i}".encode())
    samples = _scrape(broker)
    assert samples["stableline_publish_latency_seconds_count"] == 3
    assert 0 < samples["stableline_publish_latency_seconds_sum"] < 10
    # Buckets from a quarter of a millisecond up: where a broker's latencies fall.
    assert 'stableline_publish_latency_seconds_bucket{le="0.00025"}' in samples
    assert samples['stableline_publish_latency_seconds_bucket{le="+Inf"}'] == 3


def test_commit_latency_is_observed_per_topic_a_committed_transaction_wrote_to(broker, client):
    first, second = client.create_producer("c1"), client.create_producer("c2")
    txn = client.new_transaction()
    first.send(b"a", txn=txn)
    second.send(b"b", txn=txn)
    txn.commit()
    aborted = client.new_transaction()
    first.send(b"c", txn=aborted)
    aborted.abort()
    samples = _scrape(broker)
    assert samples["stableline_txn_commit_latency_seconds_count"] == 2
    assert samples['stableline_txn_commit_latency_seconds_bucket{le="+Inf"}'] == 2


def test_process_metrics_are_exposed(broker):
    samples = _scrape(broker)
    for name in (
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
    ):
        assert samples.get(name, 0) > 0, name
