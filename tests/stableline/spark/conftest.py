"""A real local SparkSession per test module (UI off), with the stableline source."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")


def pytest_collection_finish(session) -> None:
    """Start Spark's JVM before any test runs, when Spark tests were collected.

    PySpark forks its gateway JVM from this process once and keeps it for every later
    session. Forked after earlier tests started gRPC's threads, the child can lose the
    stdin pipe the gateway watches, and it exits before it sends its port ("Java
    gateway process exited before sending its port number"): the bank demo did, 2
    times in 7, until it started Spark first. Here, before any test, there are none."""
    if session.config.option.collectonly:
        return
    here = Path(__file__).parent
    if any(here in Path(item.path).parents for item in session.items):
        from stableline.spark import local_session

        local_session("local[1]", "stableline-tests-gateway").stop()  # the gateway stays


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
