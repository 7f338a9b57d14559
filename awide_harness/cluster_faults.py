"""Faults the embedded cluster makes: cards, daemons, hosts and etcd.

Every fault method returns the ``time.monotonic()`` at which the fault was made.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from awide_cluster.cards.directory import write_label
from awide_cluster.store import Compare, Delete, Put
from awide_cluster.store.errors import StoreError
from awide_harness.cluster_base import EmbeddedClusterError
from awide_harness.cluster_procs import ClusterProcs
from awide_harness.fakes import FakeSysfs
from awide_harness.procs import reap
from awide_harness.spec import DIR_MODEL, CardPlan
from awide_harness.waits import WaitTimeout, wait_until_sync


class ClusterFaults(ClusterProcs):
    """What goes wrong, on purpose: each method one fault (or its repair)."""

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

    def stop_daemon(self, host: str, bound: float = 10.0) -> float:
        """A clean stop of the host's daemon (SIGTERM; SIGKILL only after ``bound``), as
        ``systemctl stop`` does; returns the time of the SIGTERM once the process is gone.
        ``start_daemon`` starts it again."""
        h = self._host(host)
        if h.proc is None or not h.proc.alive():
            raise EmbeddedClusterError(f"daemon {host} is not running")
        self.last_fault_at = time.monotonic()
        reap([h.proc], bound)
        return self.last_fault_at

    def start_daemon(self, host: str) -> float:
        """Start the host's daemon (stopped by ``stop_daemon`` or killed); the time."""
        h = self._host(host)
        if h.proc is not None and h.proc.alive():
            raise EmbeddedClusterError(f"daemon {host} is running")
        self._spawn_daemon(host)
        return time.monotonic()

    def restart_daemon(self, host: str) -> float:
        """Stop the daemon if it runs (SIGTERM, SIGKILL after stop_timeout), start it again."""
        h = self._host(host)
        if h.proc is not None and h.proc.alive():
            reap([h.proc], self.stop_timeout)
        self._spawn_daemon(host)
        return time.monotonic()

    def restart_gateway(self, gid: str) -> float:
        """Stop the gateway's process (SIGTERM, SIGKILL after stop_timeout) and start it again
        with the same config, its lines to the same feed, from its code root as it is now
        (``code_roots``): what an engine's restart after a package upgrade does. Returns the
        time of the stop."""
        g = self._gateway(gid)
        t = time.monotonic()
        if g.proc is not None and g.proc.alive():
            reap([g.proc], self.stop_timeout)
        g.feed.join(5.0)            # the old process's lines are all read
        self._spawn_gateway(g)
        return t

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

        try:
            wait_until_sync(lambda: self._read(disarm, 3 * bound) == 0, 4 * bound,
                            "no etcd alarm listed", poll=0.05, ignore=(StoreError, TimeoutError))
        except WaitTimeout as e:
            raise EmbeddedClusterError(f"etcd alarms not disarmed: {e}") from None
        return time.monotonic()
