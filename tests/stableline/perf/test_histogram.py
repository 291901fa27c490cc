"""stableline/perf/histogram.py: percentiles within the bucket precision, merging, summary."""

from __future__ import annotations

import math
import random

from stableline.perf.histogram import LatencyHistogram, bucket_of, bucket_range


def exact_percentile(values: list[int], percent: float) -> int:
    ordered = sorted(values)
    return ordered[max(1, round(len(ordered) * percent / 100)) - 1]


def test_percentiles_are_within_the_bucket_precision_at_every_scale():
    generator = random.Random(7)
    values = [int(generator.lognormvariate(7, 2.5)) for _ in range(50_000)]  # ~1 us .. minutes
    histogram = LatencyHistogram()
    for value in values:
        histogram.record(value)
    for percent in (1, 10, 50, 90, 99, 99.9, 100):
        exact = exact_percentile(values, percent)
        assert math.isclose(histogram.percentile(percent), exact, rel_tol=1 / 64, abs_tol=1)


def test_small_values_are_exact_and_every_bucket_holds_its_value():
    for value in [0, 1, 5, 127, 128, 129, 1000, 123_456, 10**9]:
        low, high = bucket_range(bucket_of(value))
        assert low <= value <= high
        assert (high - low) <= max(value, 1) / 64
    keys = [bucket_of(value) for value in range(0, 200_000, 7)]
    assert keys == sorted(keys)


def test_weighted_record_equals_repeated_record_and_merge_equals_one_histogram():
    weighted, repeated, left, right, together = (LatencyHistogram() for _ in range(5))
    weighted.record(300, 5)
    for _ in range(5):
        repeated.record(300)
    assert weighted.counts == repeated.counts and weighted.total_us == repeated.total_us
    for value in range(1, 5000, 3):
        (left if value % 2 else right).record(value)
        together.record(value)
    merged = LatencyHistogram.merged([left, right])
    assert merged.counts == together.counts
    assert (merged.count, merged.min_us, merged.max_us) == (together.count, 1, together.max_us)
    assert merged.summary() == together.summary()


def test_summary_reports_milliseconds_and_an_empty_histogram_only_its_count():
    histogram = LatencyHistogram()
    assert histogram.summary() == {"count": 0}
    for micros in (1000, 2000, 3000, 4000):
        histogram.record(micros)
    summary = histogram.summary()
    assert summary["count"] == 4
    assert summary["min_ms"] == 1.0 and summary["max_ms"] == 4.0
    assert summary["mean_ms"] == 2.5
    assert 1.9 <= summary["p50_ms"] <= 2.1
    assert summary["p99_ms"] == summary["p99.9_ms"] == 4.0
