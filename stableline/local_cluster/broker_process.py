"""A real broker in a child process, for tests, benchmarks and crash tools.

`python -m stableline serve` on 127.0.0.1 (or `host`) with its own data dir, ready once it
prints its `ready` event. It restarts on the same data dir and ports; kill() is
SIGKILL. Its stdout (one JSON event a line) and stderr (the log) go to files
beside the data dir, one pair per run, so nothing blocks on a full pipe and the
log of a killed run stays readable. The broker's stdout carries only those events
(its log goes to stderr), which is why the `ready` line is read from there. A
broker that exits before it is ready (its data dir held by another, a port taken)
raises `BrokerExited` whose first line is the broker's own one-line reason.

`stableline cluster up` runs its brokers with it too: `output_stem` keeps one log
per broker (appended to across runs), `launch()` and `wait_ready()` start several at
once, and `supervised` keeps a broker out of the terminal's Ctrl-C (its supervisor
stops it) and ends it should the supervisor die. The fault tools run a broker on a
test host of their own: `host` is the address it binds and advertises, and
`command_prefix` (e.g. `ip netns exec NAME`) runs it in that host's network namespace.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from stableline.local_cluster.children import supervised_popen_options
from stableline.perf.coordination import process_cpu_seconds

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0
_POLL_S = 0.02


# A shared store's default ensemble (topics/persistence.py): a cluster of fewer
# brokers could place no topic with it.
DEFAULT_CLUSTER_ENSEMBLE = 3


def persistence_env(brokers: int, ack_quorum: int | None = None) -> dict[str, str]:
    """Environment giving a cluster of `brokers` a default persistence policy it can
    hold when it has fewer brokers than the default ensemble: E = Qw = `brokers`,
    Qa = `ack_quorum` (default: one fewer than E, at least 1, so one broker may be
    down, as 3/3/2 allows); empty for clusters of 3 or more. Variables already in
    this process's environment are left to win."""
    if brokers >= DEFAULT_CLUSTER_ENSEMBLE:
        return {}
    wanted = {
        "STABLELINE_DEFAULT_ENSEMBLE_SIZE": str(brokers),
        "STABLELINE_DEFAULT_WRITE_QUORUM": str(brokers),
        "STABLELINE_DEFAULT_ACK_QUORUM": str(ack_quorum or max(1, brokers - 1)),
    }
    return {key: value for key, value in wanted.items() if key not in os.environ}


class BrokerExited(RuntimeError):
    """The broker process ended before the awaited event."""

    def __init__(self, returncode: int, event: str, log: str):
        self.returncode = returncode
        lines = log.strip().splitlines()
        reason = lines[-1] if lines else "no log"
        super().__init__(f"broker exited with {returncode} before {event!r}: {reason}\n{log}")


@dataclass
class BrokerProcess:
    data_dir: Path
    extra_args: list[str] = field(default_factory=list)
    # Added to this process's environment, e.g. {"STABLELINE_FAILPOINTS": "txn-decided"}.
    env: dict[str, str] = field(default_factory=dict)
    # Between the interpreter and `-m stableline`, e.g. a profiler's `-m pyinstrument ...`.
    interpreter_args: list[str] = field(default_factory=list)
    process: subprocess.Popen | None = None
    grpc_port: int = 0
    http_port: int = 0
    # The Kafka port: None keeps it closed (`--kafka ''`, so brokers of tests never
    # contend for Kafka's 9092); 0 opens it on a free port, kept across restarts.
    kafka_port: int | None = None
    runs: int = 0
    # Whether the broker serves TLS on both ports (from its `ready` event).
    tls: bool = False
    # Its events go to OUTPUT_STEM.out (new each run) and its log is appended to
    # OUTPUT_STEM.log; by default a pair of files per run beside the data dir.
    output_stem: Path | None = None
    # Started by a supervisor (stableline.local_cluster.children).
    supervised: bool = False
    # The address it binds and advertises (gRPC, HTTP, Kafka) and clients dial.
    host: str = "127.0.0.1"
    # Before the interpreter, e.g. ["ip", "netns", "exec", NAME]: a command that execs
    # the rest in place, so signals reach the broker itself.
    command_prefix: list[str] = field(default_factory=list)
    _launched_at: float = 0.0
    _log_start: int = 0  # where this run's part of an appended log begins

    @property
    def service_url(self) -> str:
        if self.tls:
            return f"stableline+ssl://{self.host}:{self.grpc_port}"
        return f"{self.host}:{self.grpc_port}"

    target = service_url

    @property
    def kafka_bootstrap(self) -> str:
        """`bootstrap.servers` for Kafka clients (its Kafka port must be open)."""
        assert self.kafka_port, "a broker started with kafka_port=None has no Kafka port"
        return f"{self.host}:{self.kafka_port}"

    @property
    def http_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.http_port}"

    @property
    def stdout_path(self) -> Path:
        if self.output_stem is not None:
            return self.output_stem.with_name(self.output_stem.name + ".out")
        return self.data_dir.parent / f"broker-{self.runs}.out"

    @property
    def log_path(self) -> Path:
        if self.output_stem is not None:
            return self.output_stem.with_name(self.output_stem.name + ".log")
        return self.data_dir.parent / f"broker-{self.runs}.log"

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start and wait until ready; the ports of the first run are kept on restarts."""
        self.launch()
        self.wait_ready(timeout_s)

    def launch(self) -> None:
        """Start the process and return at once; wait_ready() waits for its `ready`."""
        assert self.process is None or self.process.poll() is not None, "broker already running"
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self.runs += 1
        self.stdout_path.parent.mkdir(parents=True, exist_ok=True)
        command = [
            *self.command_prefix,
            sys.executable,
            *self.interpreter_args,
            "-m",
            "stableline",
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--grpc",
            f"{self.host}:{self.grpc_port}",
            "--http",
            f"{self.host}:{self.http_port}",
            "--kafka",
            "" if self.kafka_port is None else f"{self.host}:{self.kafka_port}",
            *self.extra_args,
        ]
        log_mode = "ab" if self.output_stem is not None else "wb"
        with open(self.stdout_path, "wb") as stdout, open(self.log_path, log_mode) as stderr:
            self._log_start = stderr.tell()
            self.process = subprocess.Popen(
                command,
                stdout=stdout,
                stderr=stderr,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
                **(supervised_popen_options() if self.supervised else {}),
            )
        self._launched_at = time.monotonic()

    def wait_ready(
        self, timeout_s: float = READY_TIMEOUT_S, sleep: Callable[[float], None] = time.sleep
    ) -> float:
        """Wait for the `ready` event of the process launch() started; the seconds it
        took from the launch. Raises BrokerExited if the broker exits first. `sleep`
        paces the polling (a supervisor's may raise to stop waiting)."""
        ready = self.wait_for_event("ready", timeout_s, sleep)
        self.grpc_port, self.http_port = ready["grpc_port"], ready["http_port"]
        if self.kafka_port is not None:
            # None when broker arguments turned it off after all (`--kafka ''`).
            self.kafka_port = ready.get("kafka_port")
        self.tls = ready.get("tls", False)
        return time.monotonic() - self._launched_at

    def events(self) -> list[dict]:
        """The JSON events this run printed so far."""
        events = []
        for line in self.stdout_path.read_text(errors="replace").splitlines():
            if line.startswith("{") and line.endswith("}"):
                events.append(json.loads(line))
        return events

    def wait_for_event(
        self,
        name: str,
        timeout_s: float = READY_TIMEOUT_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> dict:
        """The first event called `name` of this run; raises if the broker exits first."""
        deadline = time.monotonic() + timeout_s
        while True:
            for event in self.events():
                if event.get("event") == name:
                    return event
            if self.process.poll() is not None:
                raise BrokerExited(self.process.returncode, name, self.log())
            if time.monotonic() > deadline:
                self.process.kill()
                raise RuntimeError(f"no {name!r} event within {timeout_s} s\n{self.log()}")
            sleep(_POLL_S)

    def admin(self, path: str):
        """GET an HTTP admin path (e.g. "/admin/v2/brokers/health"), parsed as JSON."""
        with urllib.request.urlopen(self.http_url + path, timeout=10) as response:
            return json.loads(response.read())

    def log(self) -> str:
        """This run's log (with an appended log, only what this run wrote)."""
        if not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as log:
            log.seek(self._log_start)
            return log.read().decode(errors="replace")

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait: the exit code (0 on a clean shutdown)."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        return self.wait_exit(timeout_s)

    def wait_exit(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """Wait for a broker already told to stop: its exit code (SIGKILL, and
        TimeoutExpired, after timeout_s). A second SIGTERM is never sent: one that
        lands after the broker's shutdown removed its handler would kill it."""
        assert self.process is not None, "broker not started"
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

    @contextlib.contextmanager
    def running(self) -> Iterator[BrokerProcess]:
        """Started for the block, stopped after it; a broker that then exits with
        anything but 0 (or -9: a test killed it and did not restart it) fails the
        block with its log."""
        self.start()
        try:
            yield self
        finally:
            code = self.stop()
            assert code in (0, -9), f"broker exited with {code}\n{self.log()}"

    def signal(self, signum: int) -> None:
        assert self.process is not None and self.process.poll() is None, "broker not running"
        self.process.send_signal(signum)

    def cpu_seconds(self) -> float:
        """User + system CPU of the running broker so far (Linux /proc); NaN if none runs."""
        if self.process is None:
            return float("nan")
        return process_cpu_seconds(self.process.pid)


def open_files_limited(limit: int, hard: int | None = None) -> list[str]:
    """`interpreter_args` that start the broker with its open-files soft limit at
    `limit` and its hard limit at `hard` (default: the same, as `prlimit
    --nofile=N:N` would, so raising the soft limit at start cannot help): for tests
    and benchmarks of running out of files."""
    hard = limit if hard is None else hard
    code = (
        "import resource, runpy, sys; "
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, {hard})); "
        "sys.argv = ['stableline', *sys.argv[3:]]; "
        "runpy.run_module('stableline', run_name='__main__', alter_sys=True)"
    )
    return ["-c", code]


@contextlib.contextmanager
def temporary_broker(parent: Path, prefix: str = "broker-", **options) -> Iterator[BrokerProcess]:
    """A started broker on a fresh data dir under `parent`, stopped and removed after.

    `options` are BrokerProcess fields (extra_args, env, interpreter_args). A broker
    that does not exit cleanly is reported on stderr with the end of its log.
    """
    parent.mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    broker = BrokerProcess(directory / "data", **options)
    try:
        broker.start()
        yield broker
    finally:
        code = broker.stop()
        if code != 0:
            print(f"warning: broker exited with {code}\n{broker.log()[-4000:]}", file=sys.stderr)
        shutil.rmtree(directory, ignore_errors=True)


def cluster_brokers(
    metadata_store_url: str,
    cluster: str,
    root: Path,
    count: int,
    session_timeout_s: float,
    env: dict[str, str] | None = None,
) -> list[BrokerProcess]:
    """`count` brokers of cluster `cluster` on one metadata store, not started, each in
    a directory of its own under `root` (broker-I/data, and beside it its logs), with
    the metadata session (its lease) lasting `session_timeout_s`: the cluster of the
    tests and of the fault tools."""
    return [
        BrokerProcess(
            root / f"broker-{i}" / "data",
            extra_args=["--metadata-store", metadata_store_url, "--cluster", cluster],
            env={"STABLELINE_METADATA_SESSION_TIMEOUT_S": str(session_timeout_s), **(env or {})},
        )
        for i in range(count)
    ]
