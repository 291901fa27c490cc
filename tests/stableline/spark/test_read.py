"""Batch reads through a real broker and a real local SparkSession."""

from __future__ import annotations

import pytest

import stableline

RU = stableline.IsolationLevel.READ_UNCOMMITTED


def _load(spark, broker, topic: str, **options):
    reader = spark.read.format("stableline").option("service", broker.service_url)
    reader = reader.option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _values(df) -> list[bytes]:
    return [bytes(row.value) for row in df.orderBy("message_id").collect()]


def _in_log_order(rows) -> list[bytes]:
    def position(row):
        return tuple(int(part) for part in row.message_id.split(":"))

    return [bytes(row.value) for row in sorted(rows, key=position)]


@pytest.fixture
def mixed_topic(client):
    """plain, committed, aborted and still-open transactional messages, interleaved."""
    producer = client.create_producer("mixed", batching_max_messages=1)
    producer.send(b"p1")
    committed = client.new_transaction()
    aborted = client.new_transaction()
    producer.send(b"c1", txn=committed)
    producer.send(b"a1", txn=aborted)
    producer.send(b"p2")
    producer.send(b"c2", txn=committed, properties={"k": "v"}, partition_key="acct-1")
    committed.commit()
    aborted.abort()
    producer.send(b"p3")
    still_open = client.new_transaction(timeout_ms=300_000)
    producer.send(b"o1", txn=still_open)
    producer.send(b"p4")  # behind the open transaction: not yet stable
    return committed


def test_read_committed_returns_committed_and_plain_values_in_log_order(spark, broker, mixed_topic):
    rows = _load(spark, broker, "mixed").collect()
    assert _in_log_order(rows) == [b"p1", b"c1", b"p2", b"c2", b"p3"]
    by_value = {bytes(r.value): r for r in rows}
    c2 = by_value[b"c2"]
    assert c2.topic == "persistent://public/default/mixed"
    assert c2.key == "acct-1" and c2.properties == {"k": "v"}
    assert c2.txn_id == f"{mixed_topic.id[0]}:{mixed_topic.id[1]}"
    assert by_value[b"p1"].txn_id is None and by_value[b"p1"].publish_time is not None


def test_read_uncommitted_returns_every_data_value(spark, broker, mixed_topic):
    rows = _load(spark, broker, "mixed", isolationLevel="read_uncommitted").collect()
    assert _in_log_order(rows) == [b"p1", b"c1", b"a1", b"p2", b"c2", b"p3", b"o1", b"p4"]


def test_positions_bound_the_read(spark, broker, client):
    producer = client.create_producer("bounded", batching_max_messages=1)
    ids = [producer.send(f"m{i}".encode()) for i in range(6)]
    start, end = ids[1], ids[4]
    df = _load(
        spark,
        broker,
        "bounded",
        startingPositions=f'{{"bounded": "{start.ledger_id}:{start.entry_id}"}}',
        endingPositions=f'{{"bounded": "{end.ledger_id}:{end.entry_id}"}}',
    )
    assert _values(df) == [b"m1", b"m2", b"m3"]


def test_a_read_spans_ledgers_and_topics(spark, broker, client):
    # Several partitions: more entries than a partition takes, over two topics.
    for topic in ("many-a", "many-b"):
        producer = client.create_producer(topic, batching_max_messages=1)
        for i in range(30):
            producer.send_async(f"{topic}-{i}".encode(), lambda error, _id: None)
        producer.flush()
    df = (
        spark.read.format("stableline")
        .option("service", broker.service_url)
        .option("topics", "many-a,many-b")
        .option("maxEntriesPerPartition", "7")
        .load()
    )
    assert df.rdd.getNumPartitions() == 10  # 30 entries a topic: 7 + 7 + 7 + 7 + 2
    rows = df.collect()
    for topic in ("many-a", "many-b"):
        mine = [r for r in rows if r.topic.endswith(topic)]
        assert _in_log_order(mine) == [f"{topic}-{i}".encode() for i in range(30)]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"isolationLevel": "read_dirty"}, "isolationLevel"),
        ({"startingPositions": "{not json"}, "startingPositions"),
        ({"startingPositions": '{"mixed": "zero"}'}, "startingPositions"),
        ({"endingPositions": "earliest"}, "endingPositions"),
        ({"maxEntriesPerPartition": "0"}, "maxEntriesPerPartition"),
    ],
)
def test_bad_options_fail_naming_the_option(spark, broker, options, named):
    with pytest.raises(Exception, match=named):
        _load(spark, broker, "mixed", **options).collect()


def test_an_unreachable_service_fails_with_a_clear_message(spark):
    df = (
        spark.read.format("stableline").option("service", "127.0.0.1:1").option("topic", "t").load()
    )
    with pytest.raises(Exception, match=r"127\.0\.0\.1:1|unavailable|UNAVAILABLE"):
        df.collect()


def test_a_narrower_schema_makes_only_its_columns(spark, broker, mixed_topic):
    full = _load(spark, broker, "mixed").collect()
    narrow = (
        spark.read.format("stableline")
        .schema("message_id string, value binary")
        .option("service", broker.service_url)
        .option("topic", "mixed")
        .load()
    )
    assert narrow.columns == ["message_id", "value"]
    assert sorted((r.message_id, bytes(r.value)) for r in narrow.collect()) == sorted(
        (r.message_id, bytes(r.value)) for r in full
    )


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ("value binary, offset long", "'offset' is not a stableline column"),
        ("value string", "is binary"),
    ],
)
def test_a_schema_that_is_not_ours_fails_naming_the_column(spark, broker, schema, message):
    df = (
        spark.read.format("stableline")
        .schema(schema)
        .option("service", broker.service_url)
        .option("topic", "mixed")
        .load()
    )
    with pytest.raises(Exception, match=message):
        df.collect()
