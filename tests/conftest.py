"""Shared fixtures: a real broker process on 127.0.0.1 with a temporary data dir."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

READY_TIMEOUT_S = 30.0


@dataclass
class BrokerProcess:
    """A `python -m stableline serve` child; restartable on the same data dir."""

    data_dir: Path
    extra_args: list[str] = field(default_factory=list)
    process: subprocess.Popen | None = None
    grpc_port: int = 0
    http_port: int = 0
    log_path: Path | None = None

    @property
    def service_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self) -> None:
        assert self.process is None or self.process.poll() is not None, "broker already running"
        self.log_path = self.data_dir.parent / f"broker-{int(time.time() * 1000)}.log"
        grpc_address = f"127.0.0.1:{self.grpc_port}"  # 0 first time; the same port on restart
        http_address = f"127.0.0.1:{self.http_port}"
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "stableline",
                "serve",
                "--data-dir",
                str(self.data_dir),
                "--grpc",
                grpc_address,
                "--http",
                http_address,
                *self.extra_args,
            ],
            stdout=subprocess.PIPE,
            stderr=open(self.log_path, "wb"),  # noqa: SIM115 - the child owns it
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        line = b""
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            if line.startswith(b"{"):
                event = json.loads(line)
                if event.get("event") == "ready":
                    self.grpc_port, self.http_port = event["grpc_port"], event["http_port"]
                    return
        self.process.kill()
        raise RuntimeError(f"broker did not become ready: {line!r}\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    def stop(self, timeout_s: float = 20.0) -> int:
        """SIGTERM and wait: the exit code (0 on a clean shutdown)."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise

    def kill(self) -> None:
        """SIGKILL: no flush, no snapshot, no goodbye."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture
def store(tmp_path: Path) -> Iterator:
    """A metadata store (LMDB) in tmp_path, for the engine packages' tests."""
    from managed_ledger import MetadataStore

    metadata = MetadataStore(tmp_path / "metadata")
    yield metadata
    metadata.close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data")
    process.start()
    try:
        yield process
    finally:
        code = process.stop()
        assert code in (0, -9), f"broker exited with {code}\n{process.log()}"


@pytest.fixture
def client(broker: BrokerProcess):
    import stableline

    with stableline.Client(broker.service_url) as connected:
        yield connected


def wait_until(condition, timeout_s: float = 10.0, message: str = "condition") -> None:
    """Wait for a condition with a deadline (no fixed sleeps standing in for sync)."""
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {message}")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


@pytest.fixture
def wait():
    """`wait(condition, timeout_s, message)`: poll a condition until a deadline."""
    return wait_until
