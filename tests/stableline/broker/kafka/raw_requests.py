"""Crafted Kafka requests on a raw socket, written with the project's codec, and
what tests of the broker's bounds watch while they run: its resident memory and
how long its health check takes."""

from __future__ import annotations

import socket
import struct
import threading
import time
import urllib.request
from collections.abc import Iterable
from pathlib import Path

from stableline.broker.kafka.protocol import messages as m
from stableline.broker.kafka.protocol.codec import Writer
from stableline.testing import BrokerProcess

CLIENT_ID = "raw-test"


def header(api_key: int, version: int, correlation_id: int = 1) -> Writer:
    return Writer().int16(api_key).int16(version).int32(correlation_id).string(CLIENT_ID)


def fetch_body(
    topics: Iterable[tuple[str, Iterable[int]]],
    max_bytes: int,
    partition_max_bytes: int,
    fetch_offset: int = 0,
    version: int = 4,
) -> bytes:
    """A Fetch (v4 or v5, READ_UNCOMMITTED, no wait) of `topics`' partitions."""
    writer = header(m.ApiKey.FETCH, version)
    writer.int32(-1).int32(0).int32(0).int32(max_bytes).int8(0)

    def partition(w: Writer, index: int) -> None:
        w.int32(index).int64(fetch_offset)
        if version >= 5:
            w.int64(-1)
        w.int32(partition_max_bytes)

    writer.array(list(topics), lambda w, t: w.string(t[0]).array(list(t[1]), partition))
    return writer.getvalue()


def produce_body(topic: str, partition_records: Iterable[tuple[int, bytes]]) -> bytes:
    """A Produce v3 (acks -1) of records to partitions of `topic`."""
    writer = header(m.ApiKey.PRODUCE, 3)
    writer.string(None).int16(-1).int32(30_000)
    writer.array(
        [topic],
        lambda w, name: w.string(name).array(
            list(partition_records), lambda pw, p: pw.int32(p[0]).bytes_(p[1])
        ),
    )
    return writer.getvalue()


class RawConnection:
    """One plain Kafka connection: frames out, frames back."""

    def __init__(self, port: int, timeout_s: float = 60.0, sock: socket.socket | None = None):
        """`sock`: a connection already made (TLS, authenticated), used as it is."""
        self.sock = sock or socket.create_connection(("127.0.0.1", port), timeout=timeout_s)

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *_exc) -> None:
        self.sock.close()

    def call(self, body: bytes) -> bytes | None:
        """The response frame (correlation id first); None if the broker closed."""
        try:
            self.sock.sendall(struct.pack(">i", len(body)) + body)
            (size,) = struct.unpack(">i", self._exactly(4))
            return self._exactly(size)
        except (ConnectionError, OSError):
            return None

    def _exactly(self, size: int) -> bytes:
        chunks = []
        while size:
            chunk = self.sock.recv(min(size, 1 << 20))
            if not chunk:
                raise ConnectionError("closed by the broker")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)


def rss_bytes(pid: int) -> int:
    """The process's resident set (VmRSS) now."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def health_seconds(broker: BrokerProcess, timeout_s: float = 30.0) -> float:
    """How long the broker's HTTP health check takes to answer."""
    started = time.monotonic()
    with urllib.request.urlopen(
        broker.http_url + "/admin/v2/brokers/health", timeout=timeout_s
    ) as response:
        response.read()
    return time.monotonic() - started


class Watch:
    """While open: the broker's peak resident memory, sampled every 10 ms, and how
    long each of its health checks took, asked one after another (two threads, so
    that a broker frozen in a health check still has its memory sampled)."""

    def __init__(self, broker: BrokerProcess) -> None:
        self._broker = broker
        self._pid = broker.process.pid
        self.before = rss_bytes(self._pid)
        self.peak = self.before
        self.health: list[float] = []
        self._done = threading.Event()
        self._threads = [
            threading.Thread(target=self._sample),
            threading.Thread(target=self._check),
        ]

    @property
    def growth(self) -> int:
        return self.peak - self.before

    def __enter__(self) -> Watch:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._done.set()
        for thread in self._threads:
            thread.join()

    def _sample(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, rss_bytes(self._pid))
            self._done.wait(0.01)

    def _check(self) -> None:
        while not self._done.is_set():
            self.health.append(health_seconds(self._broker))
            self._done.wait(0.02)
