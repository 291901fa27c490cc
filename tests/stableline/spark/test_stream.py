"""Streaming reads: micro-batches end at the stable position; a checkpoint resumes exactly."""

from __future__ import annotations


def _run_available_now(spark, broker, topic: str, checkpoint: str, **options) -> list[list[bytes]]:
    """One availableNow run of the stream into foreachBatch: the values of each micro-batch."""
    batches: list[list[bytes]] = []

    def collect(batch_df, _batch_id: int) -> None:
        rows = batch_df.collect()
        rows.sort(key=lambda r: tuple(int(p) for p in r.message_id.split(":")))
        batches.append([bytes(r.value) for r in rows])

    reader = (
        spark.readStream.format("stableline")
        .option("service", broker.service_url)
        .option("topic", topic)
        .option("startingPositions", "earliest")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    return [batch for batch in batches if batch]


def test_a_commit_between_micro_batches_is_read_in_the_next_one_and_resumes_exactly(
    spark, broker, client, tmp_path
):
    checkpoint = str(tmp_path / "checkpoint")
    producer = client.create_producer("streamed", batching_max_messages=1)
    producer.send(b"p1")
    txn = client.new_transaction()
    producer.send(b"t1", txn=txn)
    producer.send(b"p2")

    first = _run_available_now(spark, broker, "streamed", checkpoint)
    assert first == [[b"p1"]]  # the stable position stops before the open transaction

    txn.commit()
    aborted = client.new_transaction()
    producer.send(b"x", txn=aborted)
    aborted.abort()
    producer.send(b"p3")

    second = _run_available_now(spark, broker, "streamed", checkpoint)
    assert [value for batch in second for value in batch] == [b"t1", b"p2", b"p3"]

    assert _run_available_now(spark, broker, "streamed", checkpoint) == []  # nothing new


def test_read_uncommitted_stream_sees_open_transactions_at_once(spark, broker, client, tmp_path):
    producer = client.create_producer("streamed-ru", batching_max_messages=1)
    txn = client.new_transaction()
    producer.send(b"t1", txn=txn)
    producer.send(b"p1")
    batches = _run_available_now(
        spark, broker, "streamed-ru", str(tmp_path / "cp"), isolationLevel="read_uncommitted"
    )
    assert [value for batch in batches for value in batch] == [b"t1", b"p1"]
    txn.abort()
