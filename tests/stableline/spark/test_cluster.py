"""Beyond one JVM: local-cluster[2,1,1024] runs executors in their own JVMs and Python
workers, so the source and the sink must pickle and keep no driver-only state."""

from __future__ import annotations

import pytest

from stableline import IsolationLevel, MessageId

pytestmark = pytest.mark.slow


def test_write_and_read_through_separate_executor_jvms(spark_cluster, broker, client):
    df = spark_cluster.createDataFrame([(f"row-{i}",) for i in range(12)], "value string")
    df.repartition(3).write.format("stableline").option("service", broker.service_url).option(
        "topic", "cluster"
    ).mode("append").save()

    read = (
        spark_cluster.read.format("stableline")
        .option("service", broker.service_url)
        .option("topic", "cluster")
        .load()
    )
    assert sorted(bytes(r.value) for r in read.collect()) == sorted(
        f"row-{i}".encode() for i in range(12)
    )
    reader = client.create_reader("cluster", MessageId.earliest, IsolationLevel.READ_COMMITTED)
    count = 0
    while reader.has_message_available():
        reader.read_next(5000)
        count += 1
    assert count == 12
