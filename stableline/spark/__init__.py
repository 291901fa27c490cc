"""stableline for Spark: a PySpark data source named "stableline".

import stableline.spark
stableline.spark.register(spark)
spark.read.format("stableline").option("service", "127.0.0.1:6650").option("topic", "t").load()
"""

from __future__ import annotations

from stableline.spark._options import OptionError
from stableline.spark._source import StablelineDataSource

__all__ = ["OptionError", "StablelineDataSource", "local_session", "register"]


def register(spark) -> None:
    """Make format("stableline") known to this SparkSession."""
    spark.dataSource.register(StablelineDataSource)


def local_session(master: str = "local[2]", app_name: str = "stableline", **config: str):
    """A SparkSession on this machine with the source registered: Python workers run this
    interpreter (it has pyarrow and stableline), everything binds to 127.0.0.1, the UI
    and console progress bars are off. `config` adds Spark settings."""
    import os
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )
    for key, value in config.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
