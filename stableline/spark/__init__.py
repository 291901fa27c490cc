"""stableline for Spark: a PySpark data source named "stableline".

import stableline.spark
stableline.spark.register(spark)
spark.read.format("stableline").option("service", "127.0.0.1:6650").option("topic", "t").load()
"""

from __future__ import annotations

from stableline.spark._options import OptionError
from stableline.spark._source import StablelineDataSource

__all__ = ["OptionError", "StablelineDataSource", "register"]


def register(spark) -> None:
    """Make format("stableline") known to this SparkSession."""
    spark.dataSource.register(StablelineDataSource)
