"""The campaign's cluster: real etcd, daemons, store services and instrumented gateways.

Built from the embedded harness's parts (``awide_harness``: ``EtcdCluster``, the
process ``Launcher`` with its ``ip netns exec`` prefix and parent-death signal, the store
service, the config builders of ``spec``, ``StoreThread``) rather than from
``EmbeddedCluster`` itself, because the campaign needs three things that one does not have:
hosts whose etcd member and store services listen on the host's own address inside a network
namespace, an NVMe card served to every gateway through its own fake initiator (so a device
can come back under a new name), and gateways that report their poll times and accessor
latency (``gateway_probe``).

Layout (``Layout``): storage hosts s1 (directory cards d0, d1) and s2 (directory card d2 and
NVMe card n0), witness w1; one etcd member per host; gateways gpu1..gpuN. With namespaces
(root) every host and every gateway is its own namespace on one bridge; otherwise everything
runs on loopback.

Every operation is synchronous and bounded; call them from the thread that started the
cluster (the processes carry a parent-death signal bound to that thread).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from awide_cluster.cards.directory import write_label
from awide_cluster.contract import keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract.records import LeaderRecord
from awide_harness.etcd_cluster import EtcdCluster
from awide_harness.procs import CLI, STORE_SERVICE, Launcher, Proc, free_port, reap
from awide_harness.spec import (
    DIR_MODEL,
    ClusterSpec,
    Timing,
    card_spec,
    daemon_config,
    gateway_config,
)
from awide_harness.store_thread import StoreThread
from awide_cluster.store import Compare, Delete, KeyValue, Put, StoreConfig
from awide_cluster.store.errors import StoreError
from awide_harness.fakes import FakeNs, FakeNvmeWorld, FakeSysfs
from tests.faults.burst import BurstWorker
from tests.faults.gateway_probe import parse_line
from awide_harness.netns import Netns, NetnsEtcdCluster

NVME_MODEL = "AWIDE Fake NVMe Ctrl"
NVME_NQN = "nqn.2024-01.io.awide:campaign-n0"
NVME_SERIAL = "AWCAMPN0"
NVME_NGUID = "a11ce0000000000000000000000000b0"
PROBE = [sys.executable, "-m", "tests.faults.gateway_probe"]
REPO = Path(__file__).resolve().parents[2]


class TopologyError(RuntimeError):
    """The campaign cluster could not start or an operation failed (with the log tail)."""


@dataclass(frozen=True)
class Layout:
    cluster: str = "campaign"
    storage: dict[str, tuple[str, ...]] = field(default_factory=lambda: {
        "s1": ("d0", "d1"), "s2": ("d2", "n0")})
    witnesses: tuple[str, ...] = ("w1",)
    gateways: int = 4
    timing: Timing = Timing.quick()

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(self.storage) + self.witnesses

    @property
    def gateway_hosts(self) -> tuple[str, ...]:
        return tuple(f"gpu{i + 1}" for i in range(self.gateways))

    def spec(self) -> ClusterSpec:
        return ClusterSpec(cluster=self.cluster, storage_hosts=len(self.storage),
                           witness_hosts=len(self.witnesses), gateways=self.gateways,
                           timing=self.timing)


@dataclass
class Card:
    key: str                    # "s1/d0"
    host: str
    name: str
    kind: str                   # "dir" | "nvme"
    id: str
    port: int
    listen: str                 # address the store service listens on
    path: Path | None = None
    serial: str = ""
    uuid: str = ""              # dir: the label's uuid
    alt_serial: str = ""        # dir: the label swapped into its place
    alt_uuid: str = ""
    alt_id: str = ""
    proc: Proc | None = None
    starts: int = 0


class CampaignCluster:
    def __init__(self, work_dir: Path, layout: Layout = Layout(), *, use_netns: bool,
                 sink: Callable[[object], None], etcd_binary: str | None = None,
                 ready_timeout: float = 60.0) -> None:
        self.work = Path(work_dir)
        self.layout = layout
        self.spec = layout.spec()
        self.use_netns = use_netns
        self.sink = sink
        self.etcd_binary = etcd_binary
        self.ready_timeout = ready_timeout
        self.launcher = Launcher(self.work / "logs")
        self.net: Netns | None = None
        self.etcd: EtcdCluster | None = None
        self.store: StoreThread | None = None
        self.cards: dict[str, Card] = {}
        self.daemons: dict[str, Proc] = {}
        self.gateways: dict[str, Proc] = {}
        self.worlds: dict[str, FakeNvmeWorld] = {}
        self.stopped_hosts: set[str] = set()
        self._gateway_ids: dict[str, str] = {}
        self._api_ports: dict[str, int] = {}
        self._burst: BurstWorker | None = None

    # ------------------------------------------------------------------ names

    @property
    def hosts(self) -> tuple[str, ...]:
        return self.layout.hosts

    @property
    def gateway_ids(self) -> tuple[str, ...]:
        return tuple(self._gateway_ids.values())

    def member_of(self, host: str) -> int:
        return self.hosts.index(host)

    def addr(self, host: str) -> str:
        return self.net.ip(host) if self.net is not None else "127.0.0.1"

    def netns(self, host: str) -> str | None:
        return self.net.ns(host) if self.net is not None else None

    def card_by_id(self, cid: str) -> Card | None:
        return next((c for c in self.cards.values() if cid in (c.id, c.alt_id)), None)

    def names(self) -> dict[str, str]:
        """card id -> readable name (``s1/d0``, ``s1/d0~alt``)."""
        out = {c.id: c.key for c in self.cards.values()}
        out.update({c.alt_id: c.key + "~alt" for c in self.cards.values() if c.alt_id})
        return out

    # ------------------------------------------------------------------ start / stop

    def start(self) -> CampaignCluster:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        for d in ("config", "cards", "logs", "etcd", "worlds", "hosts"):
            (self.work / d).mkdir(parents=True, exist_ok=True)
        if self.use_netns:
            self.net = Netns.create(list(self.hosts) + list(self.layout.gateway_hosts))
            self.etcd = NetnsEtcdCluster(self.work / "etcd", self.net, self.hosts,
                                         binary=self.etcd_binary, stop_timeout=1.0)
        else:
            self.etcd = EtcdCluster(self.work / "etcd", size=len(self.hosts),
                                    binary=self.etcd_binary, stop_timeout=1.0)
        self.etcd.start()
        self.store = StoreThread(self.store_config())
        for host, names in self.layout.storage.items():
            for name in names:
                self._make_card(host, name)
        for host in self.hosts:
            self._write_daemon_config(host)
            self.start_daemon(host)
        for i, ghost in enumerate(self.layout.gateway_hosts):
            self._start_gateway(i, ghost)

    def store_config(self) -> StoreConfig:
        assert self.etcd is not None
        return StoreConfig(endpoints=self.etcd.endpoints, prefix=keys.prefix(self.layout.cluster),
                           call_timeout=1.0)

    def stop(self) -> None:
        if self._burst is not None:
            self._burst.close()
        procs = list(self.gateways.values()) + list(self.daemons.values())
        reap([p for p in procs if p is not None], 2.0)
        self.launcher.stop_all(1.0)
        if self.store is not None:
            self.store.close()
            self.store = None
        if self.etcd is not None:
            self.etcd.stop()
        if self.net is not None:
            self.net.destroy()
            self.net = None

    # ------------------------------------------------------------------ cards

    def _make_card(self, host: str, name: str) -> None:
        key = f"{host}/{name}"
        if name.startswith("n"):
            listen = self.addr(host)
            port = 4420 if self.net is not None else free_port()
            ident = "nguid:" + NVME_NGUID
            sysfs = FakeSysfs(self.work / "hosts" / host / "sys")
            sysfs.add_controller(subsysnqn=NVME_NQN, serial=NVME_SERIAL, model=NVME_MODEL,
                                 traddr=listen, trsvcid=port,
                                 namespaces=[FakeNs(nsid=1, nguid=NVME_NGUID)])
            # the identity the daemon reads from that sysfs (Namespace.identity's form)
            from awide_cluster.nvme.sysfs import Sysfs
            ctrl = Sysfs(sysfs.root).find_by_serial(NVME_SERIAL)[0]
            ident = ctrl.namespace().identity or ident
            card = Card(key, host, name, "nvme", regdoc.card_id(NVME_SERIAL, NVME_MODEL, ident),
                        port, listen, serial=NVME_SERIAL)
        else:
            path = self.work / "cards" / host / name
            path.mkdir(parents=True, exist_ok=True)
            serial = f"AWC-{host}-{name}".upper()
            u, alt_u = str(uuid.uuid4()), str(uuid.uuid4())
            label = write_label(path, serial, DIR_MODEL, u, force=True)
            alt_serial = serial + "-ALT"
            card = Card(key, host, name, "dir",
                        regdoc.card_id(label.serial, label.model, label.identity),
                        free_port(), "127.0.0.1", path=path, serial=serial, uuid=u,
                        alt_serial=alt_serial, alt_uuid=alt_u,
                        alt_id=regdoc.card_id(alt_serial, DIR_MODEL, f"label:{alt_u}"))
        self.cards[key] = card
        self.store_start(key)

    def _card_spec(self, c: Card) -> dict[str, Any]:
        t = self.layout.timing
        if c.kind == "dir":
            return card_spec(c.name, str(c.path), c.port, t)
        return {"name": c.name, "kind": "nvme", "serial": c.serial,
                "target": {"transport": "tcp", "traddr": c.listen, "trsvcid": c.port,
                           "subnqn": NVME_NQN},
                "store": {"tcp": f"{c.listen}:{c.port}"}, "probe_timeout": t.probe_timeout}

    def store_start(self, key: str, bound: float = 5.0) -> float:
        """Start the card's store service (returns once it listens)."""
        c = self.cards[key]
        if c.proc is not None and c.proc.alive():
            return time.monotonic()
        c.proc = self.launcher.spawn(
            f"store-{c.host}-{c.name}",
            STORE_SERVICE + ["--host", c.listen, "--port", str(c.port), "--card", c.key,
                             "--dir", str(self.work)],
            netns=self.netns(c.host))
        c.starts += 1
        self._await_log(c.proc, "listening on", c.starts, bound)
        return time.monotonic()

    def store_kill(self, key: str) -> float:
        c = self.cards[key]
        t = time.monotonic()
        if c.proc is not None:
            c.proc.kill()
        return t

    def swap_label(self, key: str) -> float:
        """Another card's label in this directory's place (atomic replace)."""
        c = self.cards[key]
        assert c.path is not None
        t = time.monotonic()
        write_label(c.path, c.alt_serial, DIR_MODEL, c.alt_uuid, force=True)
        return t

    def restore_label(self, key: str) -> float:
        c = self.cards[key]
        assert c.path is not None
        write_label(c.path, c.serial, DIR_MODEL, c.uuid, force=True)
        return time.monotonic()

    def card_glitch(self, key: str, present: bool) -> float:
        """Make the card itself fail (``present`` False) or come back, instantly: a directory
        card's directory is renamed away and back (as a flapping mount); the NVMe card's
        controller on its host goes ``connecting`` and ``live`` again. For flaps faster than
        a process could restart."""
        c = self.cards[key]
        t = time.monotonic()
        if c.kind == "dir":
            assert c.path is not None
            away = c.path.with_name(c.path.name + ".away")
            src, dst = (away, c.path) if present else (c.path, away)
            if src.exists():
                os.rename(src, dst)
        else:
            sysfs = FakeSysfs(self.work / "hosts" / c.host / "sys")
            with sysfs.lock():
                for name in sysfs.controller_names():
                    if sysfs.attr(name, "serial") == c.serial:
                        sysfs.set_state(name, "live" if present else "connecting")
        return t

    def vanish_device(self, key: str) -> list[tuple[str, str]]:
        """The NVMe card's controller disappears on every gateway's host (as after a target
        restart): (gateway id, controller name removed). The gateway must reconnect."""
        c = self.cards[key]
        gone = []
        for gid, world in self.worlds.items():
            with world.sysfs.lock():
                for name in world.sysfs.controller_names():
                    if world.sysfs.attr(name, "serial") == c.serial:
                        world.sysfs.remove_controller(name)
                        gone.append((gid, name))
        return gone

    # ------------------------------------------------------------------ daemons

    def _write_daemon_config(self, host: str) -> None:
        cards = [self._card_spec(c) for c in self.cards.values() if c.host == host]
        doc = daemon_config(self.spec, host, self.etcd.endpoints, self._api_port(host), cards)  # type: ignore[union-attr]
        doc["api"] = {"listen": f"{self.addr(host)}:{self._api_port(host)}"}
        if self.net is not None:        # plain http between the campaign's namespaces
            doc["etcd"]["allow_plaintext"] = True
        if any(c.kind == "nvme" for c in self.cards.values() if c.host == host):
            doc["sysfs_root"] = str(self.work / "hosts" / host / "sys")
        path = self.work / "config" / f"{host}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))

    def _api_port(self, host: str) -> int:
        if host not in self._api_ports:
            self._api_ports[host] = 9700 if self.net is not None else free_port()
        return self._api_ports[host]

    def daemon_status(self, host: str, bound: float = 0.5) -> dict[str, Any] | None:
        """The daemon's ``/v1/status`` (None when it does not answer within ``bound``, or
        ``host`` is no host of the cluster: a forged leader record may name anything)."""
        if host not in self.hosts:
            return None
        url = f"http://{self.addr(host)}:{self._api_port(host)}/v1/status"
        try:
            with urllib.request.urlopen(url, timeout=bound) as resp:   # noqa: S310 - our URL
                return json.loads(resp.read(1 << 20))
        except (OSError, ValueError):
            return None

    def start_daemon(self, host: str) -> float:
        old = self.daemons.get(host)
        if old is not None and old.alive():
            reap([old], 2.0)
        self.daemons[host] = self.launcher.spawn(
            f"daemon-{host}", CLI + ["run", "--config", str(self.work / "config" / f"{host}.yaml")],
            netns=self.netns(host))
        return time.monotonic()

    def daemon_signal(self, host: str, sig: int) -> float:
        p = self.daemons[host]
        t = time.monotonic()
        p.signal(sig)
        return t

    def kill_daemon(self, host: str) -> float:
        p = self.daemons[host]
        t = time.monotonic()
        p.kill()
        return t

    # ------------------------------------------------------------------ hosts

    def host_procs(self, host: str) -> list[Proc]:
        procs = [self.daemons[host]] + [c.proc for c in self.cards.values()
                                       if c.host == host and c.proc is not None]
        return [p for p in procs if p.alive()]

    def partition(self, host: str) -> tuple[float, str]:
        """Cut ``host`` off: its link goes down (namespaces), or on loopback every process of
        the host (etcd member, daemon, store services) is SIGSTOPped. (time, how)."""
        t = time.monotonic()
        if self.net is not None:
            self.net.cut(host)
            return t, "link down"
        assert self.etcd is not None
        self.etcd.freeze(self.member_of(host))
        for p in self.host_procs(host):
            p.signal(signal.SIGSTOP)
        self.stopped_hosts.add(host)
        return t, "SIGSTOP of all its processes (loopback: no namespaces)"

    def heal_partition(self, host: str) -> float:
        if self.net is not None:
            self.net.mend(host)
        else:
            assert self.etcd is not None
            for p in self.host_procs(host):
                p.signal(signal.SIGCONT)
            self.etcd.thaw(self.member_of(host))
            self.stopped_hosts.discard(host)
        return time.monotonic()

    # ------------------------------------------------------------------ gateways

    def _start_gateway(self, index: int, ghost: str) -> None:
        world = FakeNvmeWorld(self.work / "worlds" / ghost)
        for c in self.cards.values():
            if c.kind == "nvme":
                world.add_target(NVME_NQN, serial=c.serial, model=NVME_MODEL, traddr=c.listen,
                                 trsvcid=c.port, nguid=NVME_NGUID)
        doc = gateway_config(self.spec, index, self.etcd.endpoints)   # type: ignore[union-attr]
        doc["host"] = ghost
        doc["nvme"] = {"program": str(world.bin_dir / "nvme"),
                       "sysfs_root": str(world.sysfs_root), "command_timeout": 2.0}
        doc["watch"] = True
        if self.net is not None:        # plain http between the campaign's namespaces
            doc["etcd"]["allow_plaintext"] = True
        path = self.work / "config" / f"{ghost}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        gid = f"{ghost}-{doc['pod']}"
        self._gateway_ids[ghost] = gid
        self.worlds[gid] = world
        env = {k: v for k, v in world.env().items() if k == "PATH" or k.startswith("AWIDE_")}
        env["PYTHONPATH"] = str(REPO)
        proc = self.launcher.spawn(f"gateway-{ghost}", PROBE + ["--config", str(path)],
                                   netns=self.netns(ghost), pipe_stdout=True, env=env)
        self.gateways[gid] = proc
        threading.Thread(target=self._read_gateway, args=(proc,), name=f"feed-{gid}",
                         daemon=True).start()

    def _read_gateway(self, proc: Proc) -> None:
        stream = proc.popen.stdout
        assert stream is not None
        try:
            for line in iter(stream.readline, b""):
                rec = parse_line(line)
                if rec is not None:
                    self.sink(rec)
        except (OSError, ValueError):
            pass

    def gateways_alive(self) -> list[str]:
        return [gid for gid, p in self.gateways.items() if not p.alive()]

    def burst(self, readers: int, duration: float) -> str:
        """A burst of registry reads from ``readers`` extra gateway followers, from the first
        gateway host's namespace (``burst.BurstWorker``); its one-line JSON summary."""
        assert self.etcd is not None
        if self._burst is None:
            self._burst = BurstWorker(
                self.launcher, self.work / "burst.fifo",
                ["--endpoints", ",".join(self.etcd.endpoints), "--cluster",
                 self.layout.cluster], netns=self.netns(self.layout.gateway_hosts[0]),
                env={"PYTHONPATH": str(REPO)})
        return self._burst.run(readers, duration)

    # ------------------------------------------------------------------ etcd reads

    def leader_host(self, bound: float = 1.0) -> str | None:
        """Who holds the leader key; None when nobody does, etcd does not answer, or the key
        holds no leader record of a host of the cluster (written by hand)."""
        assert self.store is not None
        try:
            kv = self.store.call(lambda s: s.get(keys.LEADER), bound)
        except (StoreError, TimeoutError):
            return None
        rec = LeaderRecord.decode(kv.value) if kv is not None else None
        return rec.host if rec is not None and rec.host in self.hosts else None

    def reports(self, bound: float = 1.0) -> tuple[int, dict[str, int]] | None:
        """(etcd revision, {host: mod_revision of its report}); None when etcd does not
        answer within ``bound``."""
        assert self.store is not None
        try:
            res = self.store.call(lambda s: s.range(keys.MEMBERS, prefix=True, keys_only=True),
                                  bound)
        except (StoreError, TimeoutError):
            return None
        return res.revision, {keys.tail(kv.key, keys.MEMBERS): kv.mod_revision for kv in res.kvs}

    # ------------------------------------------------------------------ etcd alarms

    def raise_nospace(self, member: int, bound: float = 2.0) -> float:
        """Raise etcd's NOSPACE alarm as member ``member`` (Maintenance API, ACTIVATE): from
        then on etcd refuses every write, as after a full backend quota. Returns the time."""
        assert self.store is not None and self.etcd is not None
        url = self.etcd.endpoints[member]

        async def activate(s) -> None:
            st = await s.endpoint_status(url, timeout=bound)
            await s.write("/v3/maintenance/alarm", {"action": "ACTIVATE", "alarm": "NOSPACE",
                                                    "memberID": str(st.member_id)},
                          bound, "alarm activate")

        self.store.call(activate, bound + 0.5)
        return time.monotonic()

    def disarm_alarms(self, bound: float = 5.0) -> float:
        """Deactivate every raised alarm (what ``etcdctl alarm disarm`` does). Returns the time
        once etcd lists none."""
        assert self.store is not None

        async def disarm(s) -> int:
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
                left = self.store.call(disarm, 3 * bound)
                if left == 0:
                    return time.monotonic()
                why = f"{left} alarm(s) still listed"
            except (StoreError, TimeoutError) as e:
                why = f"{type(e).__name__}: {e}"
            if time.monotonic() > deadline:
                raise TopologyError(f"etcd alarms not disarmed within {4 * bound:g} s: {why}")
            time.sleep(0.05)
    # ------------------------------------------------------------------ writes by hand

    def write_by_hand(self, key: str, value: bytes | None, bound: float = 3.0) -> int:
        """What an intruder or a careless operator does: ``value`` put at ``key`` (relative to
        the cluster prefix) off any lease, or the key deleted (``value`` None; only if it
        exists). The etcd revision of the write; 0 when there was nothing to delete. Raises
        StoreError/TimeoutError when etcd did not confirm it (it may still have happened)."""
        assert self.store is not None
        if value is None:
            cmp, ops = [Compare(key, "create", "greater", 0)], [Delete(key)]
        else:
            cmp, ops = [], [Put(key, value)]
        res = self.store.call(lambda s: s.txn(cmp, ops, timeout=bound), bound + 0.5)
        return res.revision if res.succeeded else 0

    def read_key(self, key: str, bound: float = 1.0) -> KeyValue | None:
        """The key's current value (None: absent). Raises StoreError/TimeoutError."""
        assert self.store is not None
        return self.store.call(lambda s: s.get(key), bound)

    def wait_leader(self, bound: float) -> str | None:
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            host = self.leader_host(min(1.0, bound))
            if host is not None:
                return host
            time.sleep(0.05)
        return None

    # ------------------------------------------------------------------ helpers

    def _await_log(self, proc: Proc, text: str, count: int, bound: float) -> None:
        deadline = time.monotonic() + bound
        while True:
            try:
                n = proc.log_path.read_text(errors="replace").count(text)
            except OSError:
                n = 0
            if n >= count:
                return
            if not proc.alive() or time.monotonic() > deadline:
                raise TopologyError(f"{proc.name} did not say {text!r} within {bound:g} s:\n"
                                    f"{proc.log_tail()}")
            time.sleep(0.01)
