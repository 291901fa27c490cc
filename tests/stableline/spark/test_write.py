"""Transactional batch writes: all rows once, visible together, or none at all."""

from __future__ import annotations

import pytest

import stableline
from stableline import MessageId

RC = stableline.IsolationLevel.READ_COMMITTED
RU = stableline.IsolationLevel.READ_UNCOMMITTED


def _values(broker, topic: str, level) -> list[bytes]:
    with stableline.Client(broker.service_url) as client:
        reader = client.create_reader(topic, MessageId.earliest, level)
        values = []
        while reader.has_message_available():
            values.append(reader.read_next(5000).data())
        return values


def _save(df, broker, topic: str, **options) -> None:
    writer = df.write.format("stableline").option("service", broker.service_url)
    writer = writer.option("topic", topic).mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def _rows(spark, count: int, partitions: int = 4):
    from pyspark.sql import functions as F

    return spark.range(count, numPartitions=partitions).select(
        F.format_string("v%05d", "id").alias("value"),
        F.format_string("k%d", F.col("id") % 7).alias("key"),
        F.create_map(F.lit("n"), F.col("id").cast("string")).alias("properties"),
    )


def test_ten_thousand_rows_come_back_exactly_once(spark_with_retries, broker):
    spark = spark_with_retries
    _save(_rows(spark, 10_000), broker, "written")
    committed = _values(broker, "written", RC)
    assert sorted(committed) == [f"v{i:05d}".encode() for i in range(10_000)]
    df = spark.read.format("stableline").option("service", broker.service_url)
    rows = df.option("topic", "written").load().where("value = cast('v00042' as binary)").collect()
    assert [(r.key, r.properties, r.txn_id is not None) for r in rows] == [
        ("k0", {"n": "42"}, True)
    ]


def test_a_job_failing_midway_leaves_nothing_visible_and_nothing_open(spark_with_retries, broker):
    from pyspark.sql import functions as F

    def explode_on_the_last_partition(value):
        if value == "v02900":
            raise RuntimeError("a row this job cannot write")
        return value

    failing = F.udf(explode_on_the_last_partition, "string")
    df = _rows(spark_with_retries, 3000, partitions=3).select(failing("value").alias("value"))
    with pytest.raises(Exception, match="a row this job cannot write"):
        _save(df, broker, "failed-job", rowsPerBatch="100")

    assert _values(broker, "failed-job", RC) == []
    stats = broker.admin("/admin/v3/transactions/transactionBufferStats/public/default/failed-job")
    assert stats["ongoingTxnSize"] == 0  # aborted, not left open
    assert len(_values(broker, "failed-job", RU)) > 0  # the other partitions had written


def test_a_retried_task_sends_only_what_its_failed_attempt_did_not_write(broker):
    # A task as Spark retries it: the same partition's rows, under the same producer
    # name, into the same transaction. (Through Spark, a failing row kills the first
    # attempt before its rows reach the writer, so the attempt is driven here.)
    from pyspark.sql import Row

    from stableline.spark._write import Transaction, parse_write_options, write_partition

    options = parse_write_options(
        {"service": broker.service_url, "topic": "retried", "rowsPerBatch": "100"}
    )
    transaction = Transaction.open(options.connection, options.txn_timeout_ms)
    rows = [Row(value=f"v{i:05d}".encode()) for i in range(1000)]

    def dies_at_row_250():
        yield from rows[:250]
        raise RuntimeError("the executor running the first attempt died")

    columns = frozenset({"value"})
    with pytest.raises(RuntimeError, match="first attempt died"):
        write_partition(options, transaction.id, "spark-w-0", dies_at_row_250(), columns, 0)
    report = write_partition(options, transaction.id, "spark-w-0", iter(rows), columns, 0)
    assert transaction.end(commit=True) == "COMMITTED"

    assert (report.rows, report.batches_already_written, report.batches_sent) == (1000, 2, 8)
    expected = [f"v{i:05d}".encode() for i in range(1000)]
    assert _values(broker, "retried", RC) == expected
    assert _values(broker, "retried", RU) == expected  # not even inside the transaction


@pytest.mark.parametrize(
    ("options", "named"),
    [({"rowsPerBatch": "0"}, "rowsPerBatch"), ({"topic": "bad//name"}, "topic")],
)
def test_bad_write_options_fail_naming_the_option(spark_with_retries, broker, options, named):
    df = _rows(spark_with_retries, 10)
    writer = df.write.format("stableline").option("service", broker.service_url)
    writer = writer.option("topic", "fine").mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(Exception, match=named):
        writer.save()


def test_a_dataframe_without_a_value_column_is_refused(spark_with_retries, broker):
    df = spark_with_retries.range(3)
    with pytest.raises(Exception, match="'value' column"):
        _save(df, broker, "no-value")
