"""A one-member etcd in a child process on 127.0.0.1: `stableline cluster up`'s, and the tests'.

The binary is `etcd` on PATH or /usr/bin/etcd (Debian's `etcd-server` package);
without one, INSTALL_HINT says how to get it. The member keeps its data in
DIRECTORY/data and appends its log to DIRECTORY/etcd.log. Its ports are chosen once
(free ones unless given) and kept: stop() and start() again bring back the same
member at the same URL. start() returns once etcd's /health says so; stop() is
SIGTERM, then a wait (etcd re-raises the signal: it exits with -SIGTERM). The fault
tools put it on a test host of their own: `host` is the address it listens on, and
`command_prefix` (e.g. `ip netns exec NAME`) runs it in that host's network namespace.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from stableline.local_cluster.children import supervised_popen_options

READY_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 10.0
_POLL_S = 0.05
INSTALL_HINT = (
    "no etcd found (looked on PATH and at /usr/bin/etcd): install it, e.g. "
    "`sudo apt-get install etcd-server` on Debian or Ubuntu (etcd 3.4 or newer), "
    "or pass --etcd URL to use an etcd you already run"
)


def find_etcd() -> str | None:
    """The etcd binary's path, or None."""
    return shutil.which("etcd") or (
        "/usr/bin/etcd" if os.access("/usr/bin/etcd", os.X_OK) else None
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class EtcdNotReady(RuntimeError):
    """etcd exited, or did not become healthy in time; the message ends with its log."""


class EtcdProcess:
    """One etcd member on 127.0.0.1 or `host` (see the module docstring)."""

    def __init__(
        self,
        binary: str,
        directory: Path,
        tls: dict[str, Path] | None = None,
        *,
        client_port: int = 0,
        peer_port: int = 0,
        supervised: bool = False,
        host: str = "127.0.0.1",
        command_prefix: Sequence[str] = (),
    ):
        """`tls`: {"ca", "cert", "key", "client_cert", "client_key"} files; clients then
        need TLS and a certificate the CA signed. `supervised`: see children.py."""
        self.binary = binary
        self.directory = directory
        self.tls = tls
        self.client_port = client_port or free_port()
        self.peer_port = peer_port or free_port()
        self.supervised = supervised
        self.host = host
        self.command_prefix = list(command_prefix)
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """The metadata store URL brokers take (`--metadata-store`)."""
        return f"etcd://{self.host}:{self.client_port}"

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.client_port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "etcd.log"

    @property
    def _client_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.client_port}"

    def start(
        self, timeout_s: float = READY_TIMEOUT_S, sleep: Callable[[float], None] = time.sleep
    ) -> float:
        """Start and wait until healthy: the seconds it took. Raises EtcdNotReady.
        `sleep` paces the health checks (a supervisor's may raise to stop waiting;
        the process is then left to stop())."""
        self.directory.mkdir(parents=True, exist_ok=True)
        client = self._client_url
        peer = f"http://{self.host}:{self.peer_port}"
        command = [
            *self.command_prefix,
            self.binary,
            "--name=stableline",
            f"--data-dir={self.directory / 'data'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=stableline={peer}",
            "--logger=zap",
            "--log-level=warn",
        ]
        if self.tls:
            command += [
                f"--cert-file={self.tls['cert']}",
                f"--key-file={self.tls['key']}",
                f"--trusted-ca-file={self.tls['ca']}",
                "--client-cert-auth",
            ]
        started = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=log,
                **(supervised_popen_options() if self.supervised else {}),
            )
        deadline = started + timeout_s
        while not self._healthy():
            exited = self.process.poll() is not None
            if exited or time.monotonic() > deadline:
                self.stop()
                what = "exited" if exited else f"was not healthy within {timeout_s:.0f} s"
                raise EtcdNotReady(f"etcd {what}; its log ({self.log_path}):\n{self._log_tail()}")
            sleep(_POLL_S)
        return time.monotonic() - started

    def _log_tail(self, lines: int = 20) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def _healthy(self) -> bool:
        context = None
        if self.tls:
            context = ssl.create_default_context(cafile=str(self.tls["ca"]))
            context.load_cert_chain(self.tls["client_cert"], self.tls["client_key"])
        try:
            with urllib.request.urlopen(
                f"{self._client_url}/health", timeout=1, context=context
            ) as reply:
                return json.loads(reply.read()).get("health") == "true"
        except (OSError, ValueError):
            return False

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """SIGTERM and wait (SIGKILL after timeout_s). True when it stopped on the
        SIGTERM, or was not running."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return True
        process.terminate()
        try:
            code = process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            return False
        return code in (0, -signal.SIGTERM)
