"""ThrottledLog: one line per interval, saying how many were held back."""

from __future__ import annotations

import logging

from stableline.broker.guarded_accept import ThrottledLog


def test_a_burst_is_one_line_then_one_more_with_the_count(caplog, monkeypatch):
    now = [100.0]
    monkeypatch.setattr("stableline.broker.guarded_accept.time.monotonic", lambda: now[0])
    logger = logging.getLogger("test.throttled")
    throttled = ThrottledLog(logger, interval_s=10.0)
    with caplog.at_level(logging.INFO, logger="test.throttled"):
        for _ in range(1000):
            throttled(logging.ERROR, "accept failed: %s", "Too many open files")
        now[0] += 10.0
        throttled(logging.ERROR, "accept failed: %s", "Too many open files")
    assert [r.getMessage() for r in caplog.records] == [
        "accept failed: Too many open files",
        "accept failed: Too many open files (999 more like it since the last such line)",
    ]
