"""`stableline cluster up` for real: an etcd and three brokers in child processes, used
through the service URL it prints, stopped by Ctrl-C with nothing left running, and
brought back with its topics by a second `cluster up` on the same data dir."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import stableline
from stableline.cli.main import main
from tests.metadata.conftest import etcd_binary  # noqa: F401 - the fixture
from tests.stableline.broker.kafka.conftest import confluent_consume

pytestmark = pytest.mark.usefixtures("etcd_binary")

START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 60.0
FREE_PORTS = ["--base-grpc-port", "0", "--base-http-port", "0", "--base-kafka-port", "0"]


class ClusterUp:
    """`stableline cluster up` in a child process, its output read line by line."""

    def __init__(self, data_dir: Path, *options: str):
        command = [sys.executable, "-m", "stableline", "cluster", "up"]
        self.process = subprocess.Popen(
            [*command, "--data-dir", str(data_dir), *options],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.output: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for line in self.process.stdout:
                self._lines.put(line.rstrip("\n"))
        finally:
            # Whatever ended the reading, the end is told: interrupt() waits for it.
            self._lines.put(None)

    def wait_for(self, pattern: str, timeout_s: float = START_TIMEOUT_S) -> re.Match:
        """The first line from here on matching `pattern`."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no line matching {pattern!r} within {timeout_s} s:\n" + "\n".join(self.output)
                ) from None
            if line is None:
                raise AssertionError(
                    f"cluster up ended before {pattern!r}:\n" + "\n".join(self.output)
                )
            self.output.append(line)
            match = re.search(pattern, line)
            if match:
                return match

    def children(self) -> list[int]:
        """The pids of its child processes (etcd and the brokers)."""
        pid = self.process.pid
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]

    def interrupt(self) -> int:
        """Ctrl-C; the exit code once it ended."""
        self.process.send_signal(signal.SIGINT)
        try:
            code = self.process.wait(STOP_TIMEOUT_S)
        finally:
            if self.process.poll() is None:
                self.process.kill()
        while (line := self._lines.get()) is not None:  # the rest of its output
            self.output.append(line)
        return code

    def started(self) -> tuple[str, list[str]]:
        """Waits for the table: (the service URL, each broker's HTTP URL)."""
        http_urls = [
            self.wait_for(rf"^\s+broker-{i}\s+\S+\s+(http://\S+)/").group(1) for i in range(3)
        ]
        service_url = self.wait_for(r"^service URL for clients: (\S+)$").group(1)
        return service_url, http_urls


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _roundtrip(service_url: str, topics: list[str]) -> None:
    with stableline.Client(service_url) as client:
        for topic in topics:
            consumer = client.subscribe(
                topic, "s", initial_position=stableline.InitialPosition.Earliest
            )
            client.create_producer(topic).send(topic.encode())
            message = consumer.receive(timeout_millis=10_000)
            assert message.data() == topic.encode()
            consumer.acknowledge(message)
            consumer.close()


@pytest.mark.slow
def test_cluster_up_serves_clients_through_its_service_url_and_ctrl_c_stops_every_process(
    tmp_path: Path,
):
    up = ClusterUp(tmp_path / "cluster", "--brokers", "3", *FREE_PORTS)
    try:
        service_url, http_urls = up.started()
        assert len(service_url.split(",")) == 3
        topics = [f"persistent://public/default/up-{i}" for i in range(6)]
        _roundtrip(service_url, topics)
        with stableline.Client(service_url) as client:
            owners = {client.lookup_topic(t).http_url for t in topics}
        assert owners == set(http_urls), "the topics are spread over the three brokers"
        # Kafka clients take the Kafka bootstrap line; the SDK's message is there.
        bootstrap = up.wait_for(r"^Kafka bootstrap servers: (\S+)$").group(1)
        assert len(bootstrap.split(",")) == 3
        assert confluent_consume(bootstrap, "up-0", 1) == [(0, b"persistent://public/default/up-0")]
        children = up.children()
        assert len(children) == 4  # etcd and three brokers

        # A second `cluster up` on the same dir is refused while this one runs. It
        # runs in this process, and leaves its signal handlers as it found them
        # (left ignoring SIGTERM, this process's later children could not be stopped).
        handlers = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]
        second = CliRunner().invoke(
            main, ["cluster", "up", "--data-dir", str(tmp_path / "cluster")]
        )
        assert second.exit_code == 1
        assert "is in use by another `stableline cluster up`" in second.output
        assert handlers == [
            signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        ]
    finally:
        code = up.interrupt()
    assert code == 0, "\n".join(up.output)
    assert "etcd stopped" in up.output
    assert all(_gone(pid) for pid in children), "every child process has exited"


@pytest.mark.slow
def test_cluster_up_again_on_its_data_dir_brings_back_its_brokers_with_their_topics(
    tmp_path: Path,
):
    base = tmp_path / "cluster"
    topics = [f"persistent://public/default/again-{i}" for i in range(3)]
    up = ClusterUp(base, *FREE_PORTS)
    try:
        service_url, _ = up.started()
        with stableline.Client(service_url) as client:
            for topic in topics:
                client.create_producer(topic).send(b"before the restart")
    finally:
        assert up.interrupt() == 0, "\n".join(up.output)

    again = ClusterUp(base)  # the recorded ports, whatever the defaults say
    try:
        service_url_again, _ = again.started()
        assert service_url_again == service_url
        with stableline.Client(service_url_again) as client:
            for topic in topics:
                reader = client.create_reader(topic, stableline.MessageId.earliest)
                assert reader.read_next(10_000).data() == b"before the restart"
        # A broker that dies is reported at once; the others keep running.
        victim = sorted(again.children())[-1]
        os.kill(victim, signal.SIGKILL)
        again.wait_for(rf"\(pid {victim}\) exited unexpectedly with code -9", timeout_s=30)
    finally:
        code = again.interrupt()
    assert code == 1, "a process died while it ran"


def test_ctrl_c_while_the_brokers_start_stops_everything_started(tmp_path: Path):
    up = ClusterUp(tmp_path / "cluster", *FREE_PORTS)
    try:
        up.wait_for(r"^broker-2: starting")  # every child launched, none ready yet
        children = up.children()
    finally:
        code = up.interrupt()
    assert code == 0, "\n".join(up.output)
    assert len(children) == 4
    assert all(_gone(pid) for pid in children)
    assert not (tmp_path / "cluster" / "cluster.json").exists(), "recorded once all are ready"


def test_without_etcd_it_says_how_to_install_it_and_exits_non_zero(tmp_path: Path, monkeypatch):
    import stableline.local_cluster.etcd as etcd

    monkeypatch.setattr(etcd, "find_etcd", lambda: None)
    result = CliRunner().invoke(main, ["cluster", "up", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "apt-get install etcd-server" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_options_contradicting_the_recorded_cluster_are_refused(tmp_path: Path):
    from stableline.local_cluster.layout import Requested, plan, save

    save(tmp_path, plan(Requested(3, 7000, 9000, 9092, "local", "", frozenset()), None, tmp_path))
    result = CliRunner().invoke(
        main, ["cluster", "up", "--data-dir", str(tmp_path), "--brokers", "2"]
    )
    assert result.exit_code == 2
    assert "pass --brokers 3 or more" in result.output
