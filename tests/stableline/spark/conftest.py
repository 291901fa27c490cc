"""A real local SparkSession per test module (UI off), with the stableline source."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")


def _session(master: str) -> Iterator:
    from pyspark.sql import SparkSession

    import stableline.spark

    # Executors' Python workers must be this interpreter (it has pyarrow and stableline).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # loopback only
    session = (
        SparkSession.builder.master(master)
        .appName("stableline-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    stableline.spark.register(session)
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
