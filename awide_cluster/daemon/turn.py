"""The daemon's turns: one per poll, on a random phase, never ending the loop.

One turn:
1. renew the host lease (a new lease means the old report and leadership are gone);
2. observe the local cards (``CardProbes``: concurrently, each bounded);
3. write the host report to ``members/<host>`` on the lease (a refused write is counted by
   reason, shown in ``/v1/status`` as ``write_error`` and in ``/readyz``);
4. campaign for ``leader`` when nobody holds it (``Election``); as leader run one poll cycle
   (``CycleRunner``, told whether this turn's report write failed: then the hosts cannot
   write, a write outage); otherwise follow the registry (``RegistryFollow``, for the status
   view);
5. heartbeat (health marks, systemd watchdog); every ``members_recheck`` seconds, the etcd
   member list again (``EtcdMembers``).

A reload requested since the last turn is applied first (``Reload``). A new etcd history the
store adopted is acted on once, before and after the report's write (``_history_check``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from awide_cluster.cards.model import CardObservation
from awide_cluster.contract import keys
from awide_cluster.contract.report import HostReport
from awide_cluster.contract.untrusted import clean_text
from awide_cluster.daemon.cycles import CycleRunner
from awide_cluster.daemon.election import Election
from awide_cluster.daemon.etcd_members import EtcdMembers
from awide_cluster.daemon.leader import LeaderLoop
from awide_cluster.daemon.lease import HostLease, Leadership
from awide_cluster.daemon.probes import CardProbes
from awide_cluster.daemon.registry_follow import RegistryFollow
from awide_cluster.daemon.reload import Reload
from awide_cluster.daemon.reporter import build_encoded
from awide_cluster.daemon.shared import DaemonShared
from awide_cluster.store.errors import StoreError, refusal_reason
from awide_cluster.store.port import Store

if TYPE_CHECKING:
    from awide_cluster.api.health import DaemonHealth
    from awide_cluster.api.metrics import DaemonMetrics
    from awide_cluster.api.notify import Notifier

log = logging.getLogger("awide_cluster.daemon")


class TurnLoop:
    def __init__(self, shared: DaemonShared, store: Store, *, lease: HostLease,
                 leadership: Leadership, leader_loop: LeaderLoop, metrics: DaemonMetrics,
                 health: DaemonHealth, notifier: Notifier, probes: CardProbes,
                 election: Election, cycles: CycleRunner, follow: RegistryFollow,
                 members: EtcdMembers, reload: Reload, api_url: Callable[[], str],
                 version: str, run_id: str) -> None:
        self.shared, self.store, self.lease, self.leadership = shared, store, lease, leadership
        self.leader_loop, self.metrics, self.health = leader_loop, metrics, health
        self.notifier, self.probes, self.election, self.cycles = notifier, probes, election, cycles
        self.follow, self.members, self.reload = follow, members, reload
        self.api_url, self.version, self.run_id = api_url, version, run_id
        self.seq = 0
        self.turns = 0
        self.report: HostReport | None = None
        self.turn_errors = 0                        # turns that raised (counted, survived)
        self.write_error: dict[str, str | int] | None = None   # the latest report write failed
        self._epoch = 0                             # the store's history epoch acted upon
        self.history_resets = 0                     # new etcd histories followed
        self.history_note = ""                      # why the last one was adopted
        self._ready_sent = False
        self._last_turn_error = ""

    async def run(self) -> None:
        """Turns until a stop is asked, one per poll interval on a random phase (an overrun
        starts the next at once, keeping the phase)."""
        shared = self.shared
        # a random phase: hosts started together must not poll in step (their reports
        # would land right at the leader's reads, and etcd would see bursts)
        await shared.sleep(random.uniform(0, shared.config.timing.poll_interval))
        next_at = shared.clock.monotonic()
        while not shared.stop.is_set():
            await self.guarded_turn()
            interval = shared.config.timing.poll_interval
            next_at += interval
            now = shared.clock.monotonic()
            if next_at < now:               # overran: start again now, keep the phase
                next_at = now
            await shared.sleep(next_at - now)

    async def guarded_turn(self) -> None:
        """One turn that cannot end the loop: whatever escapes it (content in etcd that a
        decoder missed, a bug) is counted, logged once per distinct reason, and the next turn
        runs as usual. Cancellation still stops the loop."""
        try:
            await self.turn()
        except Exception as e:          # noqa: BLE001 - the loop must outlive any content
            why = clean_text(f"{type(e).__name__}: {e}", 300)
            self.metrics.loop_error(type(e).__name__)
            self.turn_errors += 1
            if why != self._last_turn_error:
                log.exception("turn failed, the next one runs as usual: %s", why)
            self._last_turn_error = why
            self.shared.note_error(f"turn failed: {why}")
            self.health.etcd_failed(f"turn failed: {why}")
            self.health.beat()
            self.notifier.watchdog()

    async def turn(self) -> None:
        """One poll. Never raises for etcd or card trouble (counted, logged)."""
        shared = self.shared
        start = shared.clock.monotonic()
        await self.reload.apply_pending()
        self._history_check()
        lease_ok = await self._renew_lease()
        observations = await self.probes.observe(shared.config, shared.registry)
        report_failure = await self._write_report(observations)
        self._history_check()
        had_key = self.leadership.has_key
        elected_ok = await self.election.elect()
        if self.leadership.has_key:
            led_ok = await self.cycles.poll_cycle(report_failure)
        else:
            if had_key:
                self.leader_loop.reset(known=shared.registry)
            led_ok = await self.follow.read()
        if self.leadership.has_key:
            shared.term.set()
        else:
            shared.term.clear()
        holder = self.leadership.holder
        self.metrics.observe_leader(holder.host if holder else None,
                                    me=self.leadership.has_key)
        await self.members.recheck_when_due()
        self._heartbeat(lease_ok and not report_failure and elected_ok and led_ok, start)

    def _history_check(self) -> None:
        """Act once on a new etcd history the store adopted (a restored or rebuilt etcd,
        store/timeline.py): counted, logged, shown in /v1/status (``etcd_history_reset``); the
        registry revision followed is forgotten (the registry is kept), and leadership is won
        again in the new history; the leader then republishes the registry it holds if etcd's
        is missing, older or of another lineage (LeaderLoop, ``history_reset``)."""
        shared = self.shared
        epoch = self.store.timeline_epoch
        if epoch == self._epoch:
            return
        self._epoch = epoch
        self.history_resets += 1
        self.history_note = clean_text(self.store.timeline_note, 300)
        self.metrics.etcd_history_resets.inc()
        held = shared.registry.generation if shared.registry is not None else None
        timing = shared.config.timing
        log.warning("%s: etcd history changed: %s; keeping registry generation %s and "
                    "campaigning again; a registry to republish waits %g s for the gateways' "
                    "records", shared.config.host, self.history_note, held,
                    timing.lease_ttl + 2 * timing.poll_interval)
        self.follow.revision = 0
        self.leader_loop.history_reset = True
        # gateways notice within a poll or two, then rewrite their records (a lease granted
        # again when the new history does not know theirs): the republished generation must be
        # above what they applied, and only their records say what that was
        self.leader_loop.hold_repair_until = (shared.clock.monotonic() + timing.lease_ttl
                                              + 2 * timing.poll_interval)
        if self.leadership.has_key:
            self.leadership.history_reset()
            self.leader_loop.reset(known=shared.registry)
        else:
            self.leadership.history_reset()

    async def _renew_lease(self) -> bool:
        """1. Renew the host lease (a new one: the old report and leadership are gone); step
        down when the lease is not confirmed within TTL - margin. False: etcd failed."""
        ok = True
        try:
            if await self.lease.renew():
                self.leadership.step_down("a new lease was granted (the old one expired)")
        except StoreError as e:
            ok = False
            self.shared.note_error(f"lease: {e}")
        if self.leadership.has_key and not self.lease.valid():
            self.leadership.step_down(
                f"lease not confirmed for {self.lease.ttl - self.lease.remaining():.1f} s "
                f"(TTL {self.lease.ttl} s, margin {self.lease.margin:g} s)")
        return ok

    async def _write_report(self, observations: list[CardObservation]) -> str:
        """3. Write the host report on the lease; why it failed ("" when written or when
        there is no lease to write it on)."""
        cfg = self.shared.config
        self.seq += 1
        self.report, raw = build_encoded(
            host=cfg.host, role=cfg.role, version=self.version,
            api=self.api_url(), run=self.run_id, seq=self.seq,
            dev_cluster=cfg.dev_cluster, specs=cfg.cards, observations=observations,
            history_resets=self.history_resets, history_note=self.history_note,
            probe_note=self.probes.note, leader_note=self.leadership.taken_note,
            etcd_note=self.shared.etcd_note)
        if self.lease.id is None:
            return ""
        # the leader's members/ watch brings this value back (maybe before the put's answer):
        # what it decodes to is known (a memo of bytes, right whether or not the put lands)
        self.leader_loop.reports_memo.remember(keys.member(cfg.host), raw, self.report)
        try:
            await self.store.put(keys.member(cfg.host), raw,
                                 lease=self.lease.id, timeout=cfg.etcd.call_timeout)
        except StoreError as e:
            failure = f"host report: {e}"[:300]
            self._report_refused(e)
            self.shared.note_error(failure)
            return failure
        self.metrics.report_write(True)
        self.health.report_written()
        self.write_error = None
        return ""

    def _report_refused(self, e: StoreError) -> None:
        reason = refusal_reason(e)
        self.metrics.report_write(False)
        self.metrics.write_refused("report", reason)
        self.health.write_refused(f"{reason}: {e}"[:300])
        n = int(self.write_error["in_a_row"]) + 1 if self.write_error else 1
        self.write_error = {"write": "report", "reason": reason, "error": str(e)[:300],
                            "in_a_row": n}

    def _heartbeat(self, etcd_ok: bool, start: float) -> None:
        """5. Health marks, the systemd watchdog (and readiness once), the poll's figures."""
        if etcd_ok:
            self.health.etcd_ok()
            self.shared.last_error = ""
        else:
            self.health.etcd_failed(self.shared.last_error or "etcd call failed")
        self.health.beat()
        self.notifier.watchdog()
        if not self._ready_sent and self.report is not None and etcd_ok:
            self._ready_sent = True
            self.notifier.ready(status=f"reporting {len(self.shared.config.cards)} card(s)")
        self.turns += 1
        self.metrics.poll_done(self.shared.clock.monotonic() - start, ok=etcd_ok)
