"""A real local SparkSession per test module (UI off), with the stableline source."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")


def _session(master: str) -> Iterator:
    from stableline.spark import local_session

    session = local_session(
        master,
        "stableline-tests",
        **{"spark.sql.shuffle.partitions": "2", "spark.sql.session.timeZone": "UTC"},
    )
    yield session
    session.stop()


@pytest.fixture(scope="module")
def spark() -> Iterator:
    yield from _session("local[2]")


@pytest.fixture(scope="module")
def spark_with_retries() -> Iterator:
    """local[2, 4]: a failed task is tried again, up to four attempts."""
    yield from _session("local[2,4]")


@pytest.fixture(scope="module")
def spark_cluster() -> Iterator:
    """local-cluster[2,1,1024]: two executor JVMs of their own (slow to start: ~30 s)."""
    yield from _session("local-cluster[2,1,1024]")
