"""ThrottledLog: one line per interval, saying how many were held back."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys

from stableline.broker.connections.guarded_accept import ThrottledLog


def test_a_burst_is_one_line_then_one_more_with_the_count(caplog, monkeypatch):
    now = [100.0]
    monkeypatch.setattr(
        "stableline.broker.connections.guarded_accept.time.monotonic", lambda: now[0]
    )
    logger = logging.getLogger("test.throttled")
    throttled = ThrottledLog(logger, interval_s=10.0)
    with caplog.at_level(logging.INFO, logger="test.throttled"):
        for _ in range(1000):
            throttled(logging.ERROR, "accept failed: %s", "Too many open files")
        now[0] += 10.0
        throttled(logging.ERROR, "accept failed: %s", "Too many open files")
    assert [r.getMessage() for r in caplog.records] == [
        "accept failed: Too many open files",
        "accept failed: Too many open files (999 more like it since the last such line)",
    ]


OUT_OF_FILES_SERVER = """
import asyncio, logging, os, resource, sys
from stableline.broker.connections.address_slots import AddressSlots
from stableline.broker.connections.caps import PortCaps
from stableline.broker.connections.guarded_accept import GuardedListener

logging.basicConfig(level=logging.INFO, stream=sys.stderr)

async def main():
    slots = AddressSlots(PortCaps(10_000, 10_000))
    listener = GuardedListener("test", slots, lambda _: asyncio.Protocol(), None, 5.0)
    print(listener.start("127.0.0.1", 0), flush=True)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 5, hard))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while listener.accept_failures < 4 and loop.time() < deadline:
        await asyncio.sleep(0.05)
    failures = listener.accept_failures
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))  # descriptors back
    while len(slots) < int(sys.argv[1]) and loop.time() < deadline:
        await asyncio.sleep(0.05)
    print(failures, len(slots), flush=True)

asyncio.run(main())
"""


def test_out_of_descriptors_the_accept_loop_pauses_logs_once_and_recovers(tmp_path):
    clients = 40
    server = subprocess.Popen(
        [sys.executable, "-c", OUT_OF_FILES_SERVER, str(clients)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    sockets = []
    try:
        port = int(server.stdout.readline())
        sockets = [
            socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(clients)
        ]
        failures, accepted = map(int, server.stdout.readline().split())
        _, log = server.communicate(timeout=20)
    finally:
        for sock in sockets:
            sock.close()
        server.kill()
    assert failures >= 4  # it kept trying, paced
    lines = [line for line in log.splitlines() if "cannot accept" in line]
    assert len(lines) == 1, log
    assert "Too many open files" in lines[0]
    assert accepted == clients  # none lost: they waited in the backlog
