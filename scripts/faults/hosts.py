"""Test hosts on one machine: network namespaces on a bridge, and cuts between them.

Each host is a network namespace with its loopback up and one veth whose other end is
on a bridge in the root namespace; the bridge holds the subnet's .1, so this process
(the client) reaches every host, and the hosts reach each other, over it. The subnet
is a private 10.77.N.0/24 with N taken from this process's id (the next unused one
if another run holds it), and every name carries the id: two runs at once do not
meet. cut(a, b) adds a blackhole route to the other's address inside both
namespaces (packets vanish silently both ways, as in a real partition; each host
still reaches the client and every other host); heal() deletes the routes.

remove() deletes every namespace and link made (deleting a namespace deletes its
veth, and with it the end on the bridge); it runs at exit too, so a run that dies
half-way leaves nothing behind. Needs root and iproute2's `ip`: without them
open_hosts raises HostsUnavailable saying so.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
from dataclasses import dataclass

SUBNET_PREFIX = "10.77"
_FIRST_HOST = 10  # .1 is the bridge (the client); hosts from .10


class HostsUnavailable(RuntimeError):
    """Network namespaces cannot be made here (not root, or no `ip`)."""


@dataclass(frozen=True, slots=True)
class Host:
    name: str  # its network namespace
    address: str

    @property
    def command_prefix(self) -> list[str]:
        """Runs the command that follows inside this host (`ip netns exec` execs it
        in place: the process started is the command itself)."""
        return ["ip", "netns", "exec", self.name]


def _ip(*args: str) -> None:
    run = subprocess.run(["ip", *args], capture_output=True, text=True)
    if run.returncode != 0:
        raise subprocess.CalledProcessError(run.returncode, ["ip", *args], run.stdout, run.stderr)


def _subnets_in_use() -> set[int]:
    shown = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True)
    used = set()
    for word in shown.stdout.split():
        if word.startswith(SUBNET_PREFIX + "."):
            used.add(int(word.split(".")[2]))
    return used


class Hosts:
    """The hosts of one run (see the module docstring)."""

    def __init__(self, names: list[str], tag: int) -> None:
        self.tag = tag
        self.bridge = f"slb{tag}"
        used = _subnets_in_use()
        third = next(
            n for n in ((tag + i) % 254 + 1 for i in range(254)) if n not in used
        )  # fmt: skip
        self.subnet = f"{SUBNET_PREFIX}.{third}"
        self.client_address = f"{self.subnet}.1"
        self.hosts = {
            name: Host(f"stableline-{tag}-{name}", f"{self.subnet}.{_FIRST_HOST + i}")
            for i, name in enumerate(names)
        }
        self._made_namespaces: list[str] = []
        self._bridge_made = False
        self._cuts: set[tuple[str, str]] = set()

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def make(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        self._bridge_made = True
        _ip("addr", "add", f"{self.client_address}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, host in enumerate(self.hosts.values()):
            _ip("netns", "add", host.name)
            self._made_namespaces.append(host.name)
            outside, inside = f"sl{self.tag}h{i}", f"sl{self.tag}n{i}"
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", inside, "netns", host.name)
            _ip("link", "set", outside, "master", self.bridge)
            _ip("link", "set", outside, "up")
            _ip("-n", host.name, "addr", "add", f"{host.address}/24", "dev", inside)
            _ip("-n", host.name, "link", "set", inside, "up")
            _ip("-n", host.name, "link", "set", "lo", "up")

    def cut(self, a: str, b: str) -> None:
        """No packet between hosts a and b, either way."""
        for one, other in ((a, b), (b, a)):
            host, peer = self.hosts[one], self.hosts[other]
            _ip("-n", host.name, "route", "add", "blackhole", f"{peer.address}/32")
            self._cuts.add((one, other))

    def heal(self) -> None:
        """Every cut undone."""
        for one, other in sorted(self._cuts):
            host, peer = self.hosts[one], self.hosts[other]
            _ip("-n", host.name, "route", "del", "blackhole", f"{peer.address}/32")
            self._cuts.discard((one, other))

    def remove(self) -> None:
        """Every namespace and link made, deleted; safe to call again."""
        while self._made_namespaces:
            name = self._made_namespaces.pop()
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        if self._bridge_made:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
            self._bridge_made = False
        # Deleting a namespace deletes its veth pair; a pair made but not yet moved is
        # still here.
        for i in range(len(self.hosts)):
            subprocess.run(["ip", "link", "del", f"sl{self.tag}h{i}"], capture_output=True)


def open_hosts(names: list[str], tag: int | None = None) -> Hosts:
    """The hosts `names`, made, removed at exit at the latest (the caller removes them
    sooner, in a finally). Raises HostsUnavailable, saying why, if they cannot be made."""
    if os.geteuid() != 0:
        raise HostsUnavailable("test hosts need network namespaces: run as root")
    if shutil.which("ip") is None:
        raise HostsUnavailable("test hosts need iproute2's `ip` (e.g. `apt-get install iproute2`)")
    hosts = Hosts(names, os.getpid() if tag is None else tag)
    atexit.register(hosts.remove)
    try:
        hosts.make()
    except (subprocess.CalledProcessError, OSError) as error:
        hosts.remove()
        reason = getattr(error, "stderr", "") or str(error)
        raise HostsUnavailable(f"cannot make network namespaces: {reason.strip()}") from error
    return hosts
