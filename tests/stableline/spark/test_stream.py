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
    # Open across a streaming run (Spark start-up on a busy machine can take a minute).
    txn = client.new_transaction(timeout_ms=300_000)
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


def _stream_copy(spark, broker, source: str, sink: str, checkpoint: str) -> None:
    """One availableNow run copying `source` to `sink` through the streaming writer."""
    query = (
        spark.readStream.format("stableline")
        .option("service", broker.service_url)
        .option("topic", source)
        .option("startingPositions", "earliest")
        .load()
        .select("value", "key")
        .writeStream.format("stableline")
        .option("service", broker.service_url)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()


def _all_values(broker, topic: str, level) -> list[bytes]:
    import stableline

    with stableline.Client(broker.service_url) as client:
        reader = client.create_reader(topic, stableline.MessageId.earliest, level)
        values = []
        while reader.has_message_available():
            values.append(reader.read_next(5000).data())
        return values


def test_a_micro_batch_replayed_after_its_commit_is_not_written_twice(
    spark, broker, client, tmp_path
):
    import stableline

    producer = client.create_producer("copy-src", batching_max_messages=10)
    for i in range(40):
        producer.send_async(f"r{i}".encode(), lambda error, _id: None)
    producer.flush()
    checkpoint = tmp_path / "checkpoint"
    _stream_copy(spark, broker, "copy-src", "copy-dst", str(checkpoint))
    expected = [f"r{i}".encode() for i in range(40)]
    assert sorted(_all_values(broker, "copy-dst", stableline.IsolationLevel.READ_COMMITTED)) == (
        sorted(expected)
    )

    # A crash after the sink committed and before Spark recorded it: Spark replays
    # the batch, and the sink must recognise it.
    commits = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    assert commits, "the run committed no batch"
    for name in (str(commits[-1]), f".{commits[-1]}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    _stream_copy(spark, broker, "copy-src", "copy-dst", str(checkpoint))

    for level in stableline.IsolationLevel:
        assert sorted(_all_values(broker, "copy-dst", level)) == sorted(expected), level
