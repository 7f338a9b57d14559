"""Hosts as network namespaces on one bridge, and etcd members inside them (root only).

    net = Netns.create(["s1", "s2", "w1", "gpu1"])     # bridge + one namespace per host
    net.ns("s1"), net.ip("s1")                         # "af1k2x-s1", "10.250.37.11"
    net.cut("s1"); net.mend("s1")                      # link of s1 down / up (a partition)
    net.destroy()

Every host gets a veth pair: ``eth0`` inside its namespace, the other end on the bridge. One
private /24 (``10.250.X.0/24``, X chosen so that nothing on this machine uses it yet) carries
all of it; the bridge holds ``.1`` so the runner (root namespace) reaches the hosts. Nothing
is routed anywhere else: traffic goes only to loopback and these namespaces.

Names carry the creating process's pid (``af<pid base 36>``), so ``cleanup_stale()`` can
delete what a killed run left behind without touching anyone else's namespaces.

An etcd member inside a host is an ``EtcdCluster`` member with that host's address and its
``exec_prefix`` (``EtcdCluster(addresses=..., prefixes=...)``); every other process of a host
starts through the same prefix (``Launcher.spawn(netns=net.ns(host))``). ``EmbeddedCluster``
with ``ClusterSpec(network="netns")`` does all of it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

from awide_harness.procs import netns_prefix

_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"
_NAME = re.compile(r"^af([0-9a-z]+)(?:-|br$|v[0-9]+$)")
SUBNET_PREFIX = "10.250"
CALL_BOUND = 5.0


class NetnsError(RuntimeError):
    """A namespace, link or address could not be set up (the message has ip's words)."""


def _b36(n: int) -> str:
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = _BASE36[r] + out
        if n == 0:
            return out


def ip(*args: str, check: bool = True) -> str:
    """Run ``ip ARGS`` (a list, bounded); its stdout. NetnsError when it fails."""
    try:
        done = subprocess.run(["ip", *args], capture_output=True, text=True,
                              timeout=CALL_BOUND, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NetnsError(f"ip {' '.join(args)}: {e}") from None
    if check and done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def available() -> tuple[bool, str]:
    """(True, "") when namespaces can be used here, else (False, why not)."""
    if os.geteuid() != 0:
        return False, "not root: network namespaces need CAP_NET_ADMIN"
    if shutil.which("ip") is None:
        return False, "no `ip` program (iproute2)"
    probe = f"af{_b36(os.getpid())}-probe"
    try:
        ip("netns", "add", probe)
        ip("netns", "del", probe)
    except NetnsError as e:
        return False, f"cannot create a network namespace: {e}"
    return True, ""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_stale() -> list[str]:
    """Delete namespaces and bridges named by this module for a process that is gone."""
    removed = []
    for line in ip("netns", "list", check=False).splitlines():
        name = line.split()[0] if line.strip() else ""
        m = _NAME.match(name)
        if m and not _pid_alive(int(m.group(1), 36)):
            ip("netns", "del", name, check=False)
            removed.append(name)
    for line in ip("-o", "link", "show", "type", "bridge", check=False).splitlines():
        parts = line.split(":")
        name = parts[1].strip().split("@")[0] if len(parts) > 1 else ""
        m = _NAME.match(name)
        if m and name.endswith("br") and not _pid_alive(int(m.group(1), 36)):
            ip("link", "del", name, check=False)
            removed.append(name)
    return removed


def _free_subnet(seed: int) -> str:
    used = ip("-4", "-o", "addr", "show", check=False) + ip("-4", "route", "show",
                                                             check=False)
    for k in range(254):
        x = (seed + k) % 254 + 1
        net = f"{SUBNET_PREFIX}.{x}."
        if net not in used:
            return net
    raise NetnsError(f"no free /24 under {SUBNET_PREFIX}.0.0/16")


@dataclass
class Netns:
    tag: str
    subnet: str                                   # "10.250.37." (a /24)
    hosts: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # host -> ns, ip, veth
    cut_hosts: set[str] = field(default_factory=set)

    @property
    def bridge(self) -> str:
        return f"{self.tag}br"

    @property
    def gateway_ip(self) -> str:
        return self.subnet + "1"

    @classmethod
    def create(cls, hosts: Sequence[str]) -> Netns:
        cleanup_stale()
        pid = os.getpid()
        net = cls(tag=f"af{_b36(pid)}", subnet=_free_subnet(pid))
        try:
            ip("link", "add", net.bridge, "type", "bridge")
            ip("addr", "add", f"{net.gateway_ip}/24", "dev", net.bridge)
            ip("link", "set", net.bridge, "up")
            for i, host in enumerate(hosts):
                net.add_host(host, 10 + i)
        except BaseException:
            net.destroy()
            raise
        return net

    def add_host(self, host: str, octet: int) -> None:
        ns, veth, addr = f"{self.tag}-{host}", f"{self.tag}v{octet}", f"{self.subnet}{octet}"
        ip("netns", "add", ns)
        self.hosts[host] = (ns, addr, veth)
        ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("link", "set", veth, "master", self.bridge, "up")
        ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")
        ip("-n", ns, "link", "set", "lo", "up")

    def ns(self, host: str) -> str:
        return self.hosts[host][0]

    def ip(self, host: str) -> str:
        return self.hosts[host][1]

    def exec_prefix(self, host: str) -> list[str]:
        """The argv prefix that runs a command inside the host's namespace."""
        return netns_prefix(self.ns(host))

    def cut(self, host: str) -> None:
        """Partition: the host's only link goes down (nothing in or out but its loopback)."""
        ip("-n", self.ns(host), "link", "set", "eth0", "down")
        self.cut_hosts.add(host)

    def mend(self, host: str) -> None:
        ip("-n", self.ns(host), "link", "set", "eth0", "up")
        self.cut_hosts.discard(host)

    def destroy(self) -> None:
        """Delete every namespace (their veths go with them) and the bridge. Idempotent."""
        for ns, _, _ in self.hosts.values():
            ip("netns", "del", ns, check=False)
        self.hosts.clear()
        ip("link", "del", self.bridge, check=False)
