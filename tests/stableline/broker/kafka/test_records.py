"""Record batches v2: what Kafka clients write decodes here, what is written here
decodes in a Kafka client's reader (kafka-python's, an independent implementation),
CRC-32C and compression included."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from stableline.broker.kafka.protocol.compression import (
    Compression,
    RecordsTooLarge,
    UnsupportedCompression,
)
from stableline.broker.kafka.protocol.records import (
    ControlType,
    CorruptBatch,
    Record,
    RecordBatch,
    control_batch,
    decode_batches,
    encode_batch,
)
from tests.stableline.broker.kafka.conftest import record_batch

RECORDS = [
    (1000, b"k", b"v", [("h", b"x")]),
    (1005, None, b"w", []),
    (999, b"k2", None, [("empty", b"")]),
]


def client_batch(compression: int = 0, producer_id: int = -1, base_sequence: int = -1) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=base_sequence,
        batch_size=1 << 20,
    )
    for offset, (timestamp, key, value, headers) in enumerate(RECORDS):
        builder.append(offset, timestamp=timestamp, key=key, value=value, headers=headers)
    return bytes(builder.build())


def test_a_clients_batch_decodes_record_for_record():
    [batch] = decode_batches(client_batch(producer_id=7, base_sequence=3))
    assert (batch.producer_id, batch.base_sequence) == (7, 3)
    assert [(r.timestamp_ms, r.key, r.value, list(r.headers)) for r in batch.records] == RECORDS
    assert [r.offset_delta for r in batch.records] == [0, 1, 2]


def compressed_batch_of(value: bytes, count: int, codec: Compression = Compression.GZIP) -> bytes:
    return record_batch(*[value] * count, compression=codec)


INFLATED = [Compression.GZIP, Compression.LZ4, Compression.ZSTD]


@pytest.mark.parametrize("codec", INFLATED)
def test_a_clients_compressed_batch_decodes(codec):
    [batch] = decode_batches(compressed_batch_of(b"same value " * 10, 100, codec))
    assert batch.compression is codec
    assert [r.value for r in batch.records] == [b"same value " * 10] * 100


@pytest.mark.parametrize("codec", INFLATED)
def test_a_batch_that_decompresses_past_the_bound_is_refused_before_it_is_all_inflated(codec):
    bomb = compressed_batch_of(bytes(1 << 20), 8, codec)  # 8 MiB of zeros
    assert len(bomb) < 256 * 1024
    with pytest.raises(RecordsTooLarge, match="more than 4,194,304 bytes"):
        decode_batches(bomb, max_records_bytes=4 << 20)
    [batch] = decode_batches(bomb, max_records_bytes=16 << 20)
    assert len(batch.records) == 8


def test_a_gzip_stream_cut_short_is_corrupt():
    data = bytearray(compressed_batch_of(b"value " * 100, 20))
    del data[-10:]  # the end of the gzip stream (its CRC and size)
    data[8:12] = (len(data) - 12).to_bytes(4, "big")  # batch length
    import crc32c

    data[17:21] = crc32c.crc32c(bytes(data[21:])).to_bytes(4, "big")
    with pytest.raises(CorruptBatch, match="gzip"):
        decode_batches(bytes(data))


def test_concatenated_batches_decode_in_order():
    assert len(decode_batches(client_batch() + client_batch(Compression.GZIP))) == 2


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP])
def test_an_encoded_batch_reads_back_in_a_clients_reader(compression):
    records = tuple(
        Record(index, ts, key, value, tuple(headers))
        for index, (ts, key, value, headers) in enumerate(RECORDS)
    )
    data = encode_batch(RecordBatch(40, records, 9, 0, transactional=True, compression=compression))
    read = DefaultRecordBatch(data)
    assert read.validate_crc()
    assert (read.base_offset, read.producer_id, read.is_transactional) == (40, 9, True)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in read] == [
        (40 + i, ts, key, value, headers) for i, (ts, key, value, headers) in enumerate(RECORDS)
    ]


def test_a_control_batch_says_abort_or_commit_in_its_key():
    for control in ControlType:
        data = encode_batch(control_batch(12, control, 5, 0, 1000))
        read = DefaultRecordBatch(data)
        assert read.is_control_batch and read.is_transactional and read.producer_id == 5
        [record] = list(read)
        assert record.offset == 12
        assert record.key == b"\x00\x00\x00" + bytes([control])


def test_a_damaged_batch_fails_its_crc():
    data = bytearray(client_batch())
    data[-1] ^= 0xFF
    with pytest.raises(CorruptBatch, match="CRC"):
        decode_batches(bytes(data))


def test_a_batch_longer_than_its_bytes_is_corrupt():
    with pytest.raises(CorruptBatch):
        decode_batches(client_batch()[:-5])


def test_an_old_message_format_is_refused():
    data = bytearray(client_batch())
    data[16] = 1  # magic
    with pytest.raises(CorruptBatch, match="magic"):
        decode_batches(bytes(data))


@pytest.mark.parametrize("codec", [Compression.SNAPPY])
def test_codecs_without_a_library_here_are_refused_by_name(codec):
    data = bytearray(client_batch())
    data[22] = (data[22] & 0xF8) | codec  # attributes (low byte) after the CRC
    import crc32c

    data[17:21] = crc32c.crc32c(bytes(data[21:])).to_bytes(4, "big")
    with pytest.raises(UnsupportedCompression, match=codec.name.lower()):
        decode_batches(bytes(data))
