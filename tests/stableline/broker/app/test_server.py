"""The broker process starting and stopping: one owner per data dir, busy ports refused
in one line, a banner once ready, a shutdown that says what it waits for."""

from __future__ import annotations

import importlib.metadata
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import stableline
from stableline.testing import BrokerProcess

REFUSAL_TIMEOUT_S = 60.0


def _serve(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """`serve` with its Kafka port closed unless `args` name one (never Kafka's 9092)."""
    kafka = [] if "--kafka" in args else ["--kafka", ""]
    return subprocess.run(
        [sys.executable, "-m", "stableline", "serve", "--data-dir", str(data_dir), *kafka, *args],
        capture_output=True,
        text=True,
        timeout=REFUSAL_TIMEOUT_S,
    )


# The running broker rewrites its registration there every load report.
_REWRITTEN_BY_ITS_BROKER = "cluster-metadata/data.mdb"


def _tree(directory: Path) -> dict[str, tuple[int, int]]:
    """Every file under `directory` with its size and modification time (ns), but the
    one its own running broker rewrites on its own."""
    return {
        str(path.relative_to(directory)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(directory.rglob("*"))
        if path.is_file() and str(path.relative_to(directory)) != _REWRITTEN_BY_ITS_BROKER
    }


@pytest.fixture
def busy_port():
    """A port something listens on."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def test_a_second_broker_on_a_data_dir_is_refused_and_the_first_keeps_its_data(broker, client):
    producer = client.create_producer("owned")
    for number in range(5):
        producer.send(f"m{number}".encode())
    producer.close()
    before = _tree(broker.data_dir)
    expected = (
        f"Error: data dir {broker.data_dir.resolve()} is in use by pid {broker.process.pid}; "
        f"stop that broker or pass another --data-dir\n"
    )
    # --secure would write keys and a token under the data dir: refused before that too.
    for extra in ((), ("--secure",)):
        refused = _serve(broker.data_dir, "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0", *extra)
        assert refused.returncode == 2
        assert refused.stderr == expected
        assert refused.stdout == ""
    assert _tree(broker.data_dir) == before
    assert not (broker.data_dir / "security").exists()
    consumer = client.subscribe(
        "owned", "after", initial_position=stableline.InitialPosition.Earliest
    )
    assert [consumer.receive(10_000).data() for _ in range(5)] == [
        f"m{number}".encode() for number in range(5)
    ]


def test_a_start_after_kill_9_is_not_refused_by_the_stale_lock(tmp_path):
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        with stableline.Client(broker.service_url) as client:
            client.create_producer("survives").send(b"kept")
        killed_pid = broker.process.pid
        broker.kill()
        lock_file = broker.data_dir / "metadata" / "owner.lock"
        assert lock_file.read_text().strip() == str(killed_pid)
        broker.start()
        assert lock_file.read_text().strip() == str(broker.process.pid)
        with stableline.Client(broker.service_url) as client:
            reader = client.create_reader("survives", stableline.MessageId.earliest)
            assert reader.read_next(10_000).data() == b"kept"
    finally:
        assert broker.stop() == 0, broker.log()


# What each refusal asks for instead.
PASS_ANOTHER = {
    "--grpc": "--grpc HOST:PORT",
    "--http": "--http HOST:PORT",
    "--kafka": "--kafka HOST:PORT, or --kafka '' to turn the Kafka port off",
}


@pytest.mark.parametrize(
    ("face", "flag"), [("gRPC", "--grpc"), ("HTTP", "--http"), ("Kafka", "--kafka")]
)
def test_a_busy_port_is_refused_in_one_line_naming_the_address_and_the_flag(
    tmp_path, busy_port, face, flag
):
    addresses = {"--grpc": "127.0.0.1:0", "--http": "127.0.0.1:0", "--kafka": "127.0.0.1:0"}
    addresses[flag] = f"127.0.0.1:{busy_port}"
    refused = _serve(tmp_path / "data", *(part for item in addresses.items() for part in item))
    assert refused.returncode == 2
    assert refused.stderr == (
        f"Error: cannot listen for {face} on 127.0.0.1:{busy_port}: the address is in use; "
        f"pass another {PASS_ANOTHER[flag]}\n"
    )
    assert refused.stdout == ""
    # Refused before recovery: nothing but the (released) lock and the empty store.
    assert not (tmp_path / "data" / "ledgers").exists()


def test_the_ready_banner_names_version_data_dir_addresses_and_security(broker):
    log = broker.log()
    version = importlib.metadata.version("stableline")
    assert re.search(rf"stableline {re.escape(version)} ready in \d+\.\d s", log)
    assert f"data dir: {broker.data_dir.resolve()}" in log
    assert f"gRPC (clients' service URL): 127.0.0.1:{broker.grpc_port}" in log
    assert f"HTTP admin: {broker.http_url}   dashboard: {broker.http_url}/" in log, log
    assert "security: off (plaintext, no tokens)" in log
    # The ready event stays the only line on stdout.
    assert broker.stdout_path.read_text().splitlines() == [
        f'{{"event": "ready", "grpc_port": {broker.grpc_port}, '
        f'"http_port": {broker.http_port}, "tls": false}}'
    ]


def test_sigterm_with_a_consumer_connected_says_what_it_waits_for_and_when_done(tmp_path):
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        with stableline.Client(broker.service_url) as client:
            client.subscribe("waiting", "sub")
            assert broker.stop() == 0
    finally:
        broker.kill()
    log = broker.log()
    assert re.search(
        r"stopping: 1 gRPC call\(s\) open \(streams included\) from 1 client\(s\); "
        r"waiting up to 5 s for them to finish, then cancelling the rest",
        log,
    ), log
    assert re.search(
        r"gRPC server stopped after \d+\.\d s: the grace ran out and the calls still open "
        r"were cancelled",
        log,
    ), log
    assert re.search(r"broker stopped after \d+\.\d s", log), log


def test_sigterm_without_calls_open_stops_at_once_and_says_so(tmp_path):
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    assert broker.stop() == 0
    log = broker.log()
    assert "stopping: no gRPC calls open" in log
    assert re.search(r"gRPC server stopped after \d+\.\d s: every call had finished", log), log


def test_version_option_prints_the_installed_version():
    result = subprocess.run(
        [sys.executable, "-m", "stableline", "--version"], capture_output=True, text=True
    )
    assert result.returncode == 0
    assert result.stdout == f"stableline, version {importlib.metadata.version('stableline')}\n"


@pytest.mark.parametrize(
    ("face", "flag"), [("gRPC", "--grpc"), ("HTTP", "--http"), ("Kafka", "--kafka")]
)
async def test_a_port_taken_between_the_check_and_the_bind_is_refused_and_all_is_closed(
    tmp_path, busy_port, monkeypatch, face, flag
):
    from stableline.broker.app import server
    from stableline.broker.config import BrokerConfig

    # The edge: the early check misses the listener (as in a race with another program).
    monkeypatch.setattr(server, "_check_address_free", lambda *_: None)
    busy = f"127.0.0.1:{busy_port}"
    config = BrokerConfig(
        data_dir=tmp_path / "data",
        grpc_address=busy if flag == "--grpc" else "127.0.0.1:0",
        http_address=busy if flag == "--http" else "127.0.0.1:0",
        kafka_address=busy if flag == "--kafka" else "127.0.0.1:0",
    )
    with pytest.raises(server.StartupError) as refused:
        await server.serve(config)
    assert str(refused.value).startswith(f"cannot listen for {face} on {busy}: ")
    assert str(refused.value).endswith(f"; pass another {PASS_ANOTHER[flag]}")
    # The local store was closed and its lock given back: another process opens it.
    reopened = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from managed_ledger import LocalStore; "
            "LocalStore(Path(sys.argv[1])).close()",
            str(config.metadata_dir),
        ],
        capture_output=True,
        text=True,
        timeout=REFUSAL_TIMEOUT_S,
    )
    assert reopened.returncode == 0, reopened.stderr
