"""`stableline cluster up`'s supervisor: one etcd and N brokers, started, watched, stopped.

Files under the base dir: cluster.json (the layout, layout.py), cluster.lock (held
while a supervisor runs: a second `cluster up` on the dir is refused, naming its
pid), etcd/ (its data, etcd.log, the 0600 password files of its `root` and
`stableline-broker` users: etcd_auth.py, and its TLS files in tls/: etcd_tls.py) and broker-i/ (data/ is the broker's data dir;
broker.log its log, appended to across runs; broker.out its JSON events).

Promises:
- start(): etcd first (unless the layout names one run elsewhere), with
  authentication turned on before any broker starts, then every
  broker at once, each ready once it printed its `ready` line; progress is
  reported as each comes up. The layout is saved, with the ports bound, only once
  all are ready. If anything fails to come up, StartFailed says what, with the end
  of its log; the caller then stops what started.
- watch(): returns when a stop signal arrives or every child has exited; it is
  woken by the signal or by a child's exit (pidfds), never by a timer. A child that
  exits is reported at once, with where its log is and the log's last lines; the
  others keep running.
- stop(): SIGTERM to every broker at once, a wait for each (SIGKILL after
  STOP_TIMEOUT_S), then etcd. True when every child stopped cleanly and none had
  died before.
- Stop signals (SIGINT, SIGTERM, SIGHUP; StopSignals) are noted where they land and
  acted on only where the supervisor waits (its sleeps while children start, its
  watch), by raising Interrupted there. Why: an exception raised by a signal
  handler at an arbitrary point can leave a lock taken (subprocess's waitpid lock,
  between its acquire and its try), and the stop would then wait on it forever.
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from stableline.local_cluster import etcd_auth, etcd_tls
from stableline.local_cluster.broker_process import BrokerExited, BrokerProcess, persistence_env
from stableline.local_cluster.etcd import EtcdNotReady, EtcdProcess
from stableline.local_cluster.layout import ClusterLayout, save

READY_TIMEOUT_S = 60.0  # three brokers recovering at once on two busy cores
STOP_TIMEOUT_S = 20.0
LOG_LINES_SHOWN = 8
LOCK_FILE = "cluster.lock"


class StartFailed(RuntimeError):
    """The cluster did not come up; the caller stops what started."""


class Interrupted(BaseException):
    """A stop signal arrived: stop the cluster."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopSignals:
    """The stop signals, noted through a wakeup pipe and raised as Interrupted only by
    sleep(), check() and watch's wait (main thread only; see the module docstring)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.fd, self._write = os.pipe()
        for descriptor in (self.fd, self._write):
            os.set_blocking(descriptor, False)
        # Put back by close(): ignored signals are inherited by every process started
        # later, so a caller left ignoring SIGTERM (a test running `cluster up` in
        # process) starts children that SIGTERM cannot stop.
        self._previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
        # The C handler writes each signal's number to the pipe; the Python one has
        # nothing to do.
        self._previous_wakeup_fd = signal.set_wakeup_fd(self._write)
        for signum in STOP_SIGNALS:
            signal.signal(signum, lambda *_: None)

    def check(self) -> None:
        """Raise Interrupted if a stop signal arrived."""
        try:
            numbers = os.read(self.fd, 512)
        except BlockingIOError:
            numbers = b""
        for signum in numbers:
            if signum in STOP_SIGNALS and self.received is None:
                self.received = signum
        if self.received is not None:
            raise Interrupted(self.received)

    def sleep(self, seconds: float) -> None:
        """time.sleep, cut short by a stop signal (Interrupted)."""
        select.select([self.fd], [], [], seconds)
        self.check()

    def ignore(self) -> None:
        """From now on stop signals do nothing (the stop under way is not cut short)."""
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)

    def close(self) -> None:
        """Put back the handlers and wakeup fd found at the start (once the stop is done)."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        signal.set_wakeup_fd(self._previous_wakeup_fd)
        os.close(self.fd)
        os.close(self._write)


def _without_password(url: str) -> tuple[str, str | None]:
    """An etcd:// URL without the password of its USER:PASSWORD@, and that password."""
    scheme, sep, rest = url.partition("://")
    authority, question, query = rest.partition("?")
    credentials, at, hosts = authority.rpartition("@")
    user, colon, password = credentials.partition(":")
    if not at or not colon:
        return url, None
    return f"{scheme}{sep}{user}@{hosts}{question}{query}", urllib.parse.unquote(password)


def _tail(text: str, lines: int = LOG_LINES_SHOWN) -> str:
    kept = text.strip().splitlines()[-lines:]
    return "\n".join(f"    {line}" for line in kept) if kept else "    (empty)"


class LocalCluster:
    def __init__(
        self,
        base_dir: Path,
        layout: ClusterLayout,
        etcd_binary: str | None,
        broker_args: list[str],
        out: Callable[[str], None],
    ):
        assert layout.etcd_url or etcd_binary, "a cluster without an etcd URL runs its own"
        self.base_dir = base_dir
        self.layout = layout
        self.out = out
        # The etcd run here speaks TLS only, to clients holding its client
        # certificate (etcd_tls.py), and has authentication on (etcd_auth.py).
        self.etcd = (
            None
            if layout.etcd_url
            else EtcdProcess(
                etcd_binary,
                base_dir / "etcd",
                etcd_tls.certificates(base_dir / "etcd"),
                client_port=layout.etcd_client_port,
                peer_port=layout.etcd_peer_port,
                supervised=True,
            )
        )
        # Brokers name the etcd user in the URL and read the password from its
        # file, never from argv; they trust the CA and present the client certificate.
        store_url, password = _without_password(layout.metadata_store_url)
        store_args = ["--metadata-store", store_url]
        # An etcd given with USER:PASSWORD@: the password goes by the environment.
        store_env = {"STABLELINE_METADATA_STORE_PASSWORD": password} if password else {}
        if self.etcd is not None:
            assert self.etcd.tls is not None
            store_args = [
                "--metadata-store",
                f"etcd://{etcd_auth.BROKER_USER}@{self.etcd.endpoint}"
                + etcd_tls.store_url_options(self.etcd.tls),
                "--metadata-store-password-file",
                str(etcd_auth.password_file(self.etcd.directory, etcd_auth.BROKER_USER)),
            ]
        self.store_url = store_args[1]
        self.brokers = [
            BrokerProcess(
                base_dir / slot.name / "data",
                extra_args=[*store_args, "--cluster", layout.cluster, *broker_args],
                grpc_port=slot.grpc_port,
                http_port=slot.http_port,
                kafka_port=slot.kafka_port,
                output_stem=base_dir / slot.name / "broker",
                supervised=True,
                # A cluster of one or two keeps topics placeable (3 copies need 3).
                env={**store_env, **persistence_env(len(layout.brokers))},
            )
            for slot in layout.brokers
        ]
        self._lock: int | None = None
        self.died: list[str] = []  # children that exited while watched
        self._ready: set[str] = set()  # brokers that printed their ready line

    def name(self, broker: BrokerProcess) -> str:
        return self.layout.brokers[self.brokers.index(broker)].name

    @property
    def service_url(self) -> str:
        """What clients take: every broker's gRPC address."""
        return ",".join(f"127.0.0.1:{b.grpc_port}" for b in self.brokers)

    @property
    def kafka_bootstrap(self) -> str:
        """What Kafka clients take: every Kafka port ("" when all are off)."""
        return ",".join(b.kafka_bootstrap for b in self.brokers if b.kafka_port)

    # ------------------------------------------------------------ start

    def start(self, signals: StopSignals) -> None:
        self._take_lock()
        self._start_etcd(signals)
        self._start_brokers(signals)
        self.layout = self.layout.with_bound_ports(
            {i: (b.grpc_port, b.http_port, b.kafka_port or 0) for i, b in enumerate(self.brokers)}
        )
        save(self.base_dir, self.layout)

    def _take_lock(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.base_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(descriptor, 32).decode(errors="replace").strip() or "?"
            os.close(descriptor)
            raise StartFailed(
                f"{self.base_dir} is in use by another `stableline cluster up` (pid {holder}); "
                "stop it (Ctrl-C) or pass another --data-dir"
            ) from None
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"{os.getpid()}\n".encode())
        self._lock = descriptor

    def _start_etcd(self, signals: StopSignals) -> None:
        if self.etcd is None:
            self.out(f"etcd: using {self.layout.etcd_url}")
            return
        self.out(f"etcd: starting on {self.etcd.endpoint} (data in {self.etcd.directory}) ...")
        try:
            took = self.etcd.start(sleep=signals.sleep)
        except EtcdNotReady as error:
            raise StartFailed(str(error)) from None
        signals.check()
        try:
            credentials = etcd_auth.enable(self.etcd.endpoint, self.etcd.directory, self.etcd.tls)
        except (etcd_auth.EtcdAuthError, OSError) as error:
            raise StartFailed(f"cannot turn on etcd authentication: {error}") from None
        self.out(
            f"etcd: ready in {took:.1f} s, TLS and authentication on (user {credentials.user}, "
            f"password in {credentials.password_file}; root's beside it)"
        )

    def _start_brokers(self, signals: StopSignals) -> None:
        for broker in self.brokers:
            where = (
                f"127.0.0.1:{broker.grpc_port}, HTTP 127.0.0.1:{broker.http_port}"
                + (f", Kafka 127.0.0.1:{broker.kafka_port}" if broker.kafka_port else "")
                if broker.grpc_port
                else "free ports"
            )
            broker.launch()
            # Said once launched: a reader of this line finds the process there.
            self.out(f"{self.name(broker)}: starting on {where} ...")
        for broker in self.brokers:
            try:
                took = broker.wait_ready(READY_TIMEOUT_S, signals.sleep)
            except BrokerExited as error:
                raise StartFailed(
                    f"{self.name(broker)} exited with {error.returncode} before it was ready; "
                    f"its log ({broker.log_path}) ends:\n{_tail(broker.log())}"
                ) from None
            except RuntimeError:  # not ready in time: wait_for_event killed it
                raise StartFailed(
                    f"{self.name(broker)} was not ready within {READY_TIMEOUT_S:.0f} s; "
                    f"its log ({broker.log_path}) ends:\n{_tail(broker.log())}"
                ) from None
            self._ready.add(self.name(broker))
            self.out(f"{self.name(broker)}: ready in {took:.1f} s")

    def describe(self) -> list[str]:
        """The table of the brokers' addresses, and how to use them."""
        rows = [("broker", "gRPC", "HTTP admin and dashboard", "Kafka", "data dir")]
        for broker in self.brokers:
            rows.append(
                (
                    self.name(broker),
                    f"127.0.0.1:{broker.grpc_port}",
                    broker.http_url + "/",
                    broker.kafka_bootstrap if broker.kafka_port else "off",
                    str(broker.data_dir),
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
        table = [
            "  " + "".join(cell.ljust(w + 2) for cell, w in zip(row, widths)) + row[-1]  # noqa: B905
            for row in rows
        ]
        etcd_data = f" (TLS; data in {self.etcd.directory})" if self.etcd else ""
        return [
            f"cluster {self.layout.cluster!r} is up: {len(self.brokers)} broker(s), "
            f"metadata in {self.store_url.partition('?')[0]}{etcd_data}",
            "",
            *table,
            "",
            f"service URL for clients: {self.service_url}",
            f"  stableline produce orders -m hello --service-url {self.service_url}",
            f"  stableline admin brokers list {self.layout.cluster}",
            *([f"Kafka bootstrap servers: {self.kafka_bootstrap}"] if self.kafka_bootstrap else []),
            f"logs: {self.base_dir}/broker-N/broker.log"
            + (f", {self.etcd.log_path}" if self.etcd else ""),
            "Ctrl-C stops the brokers, then etcd.",
        ]

    # ------------------------------------------------------------ watch

    def _children(self) -> list[tuple[str, int, Callable[[], str], Path]]:
        """(name, pid, its log, its log's path) of each running child."""
        children = [
            (self.name(b), b.process.pid, b.log, b.log_path)
            for b in self.brokers
            if b.process is not None and b.process.poll() is None
        ]
        if (
            self.etcd is not None
            and self.etcd.process is not None
            and self.etcd.process.poll() is None
        ):
            etcd = self.etcd
            children.append(
                ("etcd", etcd.process.pid, lambda: etcd.log_path.read_text(), etcd.log_path)
            )
        return children

    def watch(self, signals: StopSignals) -> None:
        """Until a stop signal (Interrupted) or until every child has exited."""
        signals.check()
        watched = {}
        try:
            for child in self._children():
                watched[os.pidfd_open(child[1])] = child
            while watched:
                readable, _, _ = select.select([signals.fd, *watched], [], [])
                for descriptor in readable:
                    if descriptor == signals.fd:
                        signals.check()
                        continue
                    name, pid, log, log_path = watched.pop(descriptor)
                    os.close(descriptor)
                    self._report_exit(name, pid, log, log_path)
            self.out("every process of the cluster has exited")
        finally:
            for descriptor in watched:
                os.close(descriptor)

    def _report_exit(self, name: str, pid: int, log: Callable[[], str], log_path: Path) -> None:
        process = self.etcd.process if name == "etcd" else self._broker(name).process
        code = process.wait()
        self.died.append(name)
        consequence = (
            "the brokers cannot reach their metadata"
            if name == "etcd"
            else "its topics are unavailable until it is back (restart `cluster up`)"
        )
        self.out(
            f"{name} (pid {pid}) exited unexpectedly with code {code}: {consequence}; "
            f"its log ({log_path}) ends:\n{_tail(log())}"
        )

    def _broker(self, name: str) -> BrokerProcess:
        return self.brokers[[slot.name for slot in self.layout.brokers].index(name)]

    # ------------------------------------------------------------ stop

    def stop(self) -> bool:
        clean = not self.died
        running = [b for b in self.brokers if b.process is not None and b.process.poll() is None]
        if running:
            self.out(f"stopping {', '.join(self.name(b) for b in running)} ...")
            started = time.monotonic()
            for broker in running:
                broker.signal(signal.SIGTERM)
            for broker in running:
                try:
                    code = broker.wait_exit(STOP_TIMEOUT_S)
                except Exception:  # killed after the timeout
                    code = None
                # One still starting may not handle SIGTERM yet: it ends by it, and
                # nothing was open to lose.
                starting = self.name(broker) not in self._ready
                if code != 0 and not (starting and code == -signal.SIGTERM):
                    clean = False
                    self.out(
                        f"{self.name(broker)} did not stop cleanly (exit {code}); its log: "
                        f"{broker.log_path}"
                    )
            self.out(f"brokers stopped in {time.monotonic() - started:.1f} s")
        if self.etcd is not None and self.etcd.process is not None:
            if self.etcd.process.poll() is not None:
                self.etcd.stop()  # had exited: reported already
            elif self.etcd.stop():
                self.out("etcd stopped")
            else:
                clean = False
                self.out(
                    f"etcd did not stop on SIGTERM and was killed; its log: {self.etcd.log_path}"
                )
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
        return clean
