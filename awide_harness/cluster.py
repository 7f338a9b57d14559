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
import secrets
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from awide_cluster.access.apply import ROOT
from awide_harness.certs import make_test_pki
from awide_harness.cluster_base import (
    DEFAULT_COMMANDS,
    NO_ETCD,
    Card,
    EmbeddedClusterError,
    HostState,
    fill,
    find_etcd_binary,
)
from awide_harness.cluster_faults import ClusterFaults
from awide_harness.cluster_reads import ClusterReads
from awide_harness.etcd_cluster import ClusterTls, EtcdCluster
from awide_harness.netns import Netns
from awide_harness.ports import release
from awide_harness.procs import Launcher, reap
from awide_harness.spec import API_PORT_NETNS, ClusterSpec, gateway_config
from awide_harness.store_thread import StoreThread
from awide_harness.views import cards_in
from awide_harness.waits import WaitTimeout, wait_until_sync

__all__ = ["DEFAULT_COMMANDS", "NO_ETCD", "Card", "EmbeddedCluster", "EmbeddedClusterError",
           "fill", "find_etcd_binary"]

_LIVE: weakref.WeakSet[EmbeddedCluster] = weakref.WeakSet()


@atexit.register
def _stop_leftovers() -> None:
    for c in list(_LIVE):
        c.stop()



class EmbeddedCluster(ClusterFaults, ClusterReads):
    """The whole cluster: lifecycle here; names in ``ClusterBase``, faults in
    ``ClusterFaults``, reads and waits in ``ClusterReads``."""

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
        self.pki = None             # spec.secure: the test PKI
        self._passwords = {}        # spec.secure: etcd user -> password
        self.net = None
        self._etcd = None
        if spec.network == "loopback":
            self._etcd = self._make_etcd()
        self.launcher = Launcher(self.work_dir / "logs", die_with_parent=die_with_parent)
        self.worlds = {}     # gateway id -> its fake initiator
        self._cards = {}
        self._hosts = {}
        self._gateways = {}
        self._store = None
        self._stopped_hosts = set()
        self._lock = threading.RLock()
        self._started = self._stopped = False
        self._ports = []            # reserved loopback ports, released at stop
        self.last_fault_at = None    # time.monotonic() of the last fault made
        self.code_roots = {}        # host or gateway id -> another source tree (PYTHONPATH)

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
            self._hosts[host] = HostState(host, spec.role(host), self.work_dir / "config" /
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
            first = spec.first_leader
            try:
                wait_until_sync(lambda: self.leader_or_none() == first, self.ready_timeout / 2,
                                f"{first} leads", poll=0.05,
                                check=lambda: self._check_alive(first))
            except WaitTimeout as e:
                raise self._failure(f"{first} did not become leader ({e})") from None
        for host in order:
            self._spawn_daemon(host)
        for i, gid in enumerate(spec.gateway_ids):
            self._new_gateway(i, gid)
        if self.gateway_lines is None:
            self._wait_ready()

    def _wait_ready(self) -> None:
        want = cards_in(c.id for c in self._cards.values())

        def alive() -> None:
            for h in self._hosts:
                self._check_alive(h)
            for g in self._gateways.values():
                if g.proc is not None and not g.proc.alive():
                    raise self._failure(f"gateway {g.id} exited ({g.proc.popen.returncode})",
                                        g.proc)

        def ready() -> bool:
            views = self.gateway_views()
            return all(v is not None and want(v) for v in views.values()) and self.agree()

        try:
            wait_until_sync(ready, self.ready_timeout, "every gateway shows every card",
                            poll=0.05, check=alive)
        except WaitTimeout:
            raise self._failure("not every gateway shows every card in service "
                                f"within {self.ready_timeout:g} s: {self.disagreement()}") \
                from None

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

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

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
