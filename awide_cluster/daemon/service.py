"""The daemon's main loop: one turn per poll, everything it needs passed in.

One turn:
1. renew the host lease (a new lease means the old report and leadership are gone);
2. observe the local cards (concurrently, each bounded);
3. write the host report to ``members/<host>`` on the lease (a refused write is counted by
   reason, shown in ``/v1/status`` as ``write_error`` and in ``/readyz``);
4. campaign for ``leader`` when nobody holds it; as leader run one ``LeaderLoop.cycle`` (told
   whether this turn's report write failed: then the hosts cannot write, a write outage);
   otherwise follow the registry (for the status view);
5. heartbeat (health marks, systemd watchdog); every ``members_recheck`` seconds, the etcd
   member list again (a cluster that shrank below 3 voting members is logged, shown in
   ``/v1/status`` and ``awide_etcd_voting_members``; the daemon keeps running).

Beside the turns, a watch of ``leader`` (``_watch_leader``): when the key is vacated (deleted
on a clean stop, or by etcd when its holder's lease expired) a follower runs the campaign of
step 4 at once instead of at its next poll, and a new leader's first cycle runs right after
the won campaign, in the watch's task, as an out-of-turn cycle (``_term_cycle``: counted like a
report cycle, so the next poll cycle neither counts its reports again nor as not advancing):
the hand-over's first fenced write does not wait for this host's card probes and report. What
the watch delivers only triggers that read; the poll stays the bounded safety net.
``lease.on_leader_key`` decides.

While it leads, a watch of ``members/`` (``_watch_reports``): a host report that arrives
between two polls and says something the registry does not show yet (``arrivals``
decides, from the event's value as a hint only) runs a *report cycle* at once, its own
bounded reads and fenced write like any cycle; so a card is out when its host's
``sick_polls``-th sick report arrives, whatever the leader's phase. Cycles never overlap
(``_cycling``) and report cycles are at least ``REPORT_CYCLE_GAP`` of a poll apart.

``Daemon`` is what ``awide-cluster run`` drives and what the demo and tests start in-process
(``await d.start()`` ... ``await d.stop()``); ``abort()`` drops it like a crash (no revoke).
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from awide_cluster import __version__
from awide_cluster.cards.model import CardObservation
from awide_cluster.config import daemon as daemon_config
from awide_cluster.config.common import ConfigError
from awide_cluster.config.daemon import DaemonConfig
from awide_cluster.contract import bounds, keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract import report as reportdoc
from awide_cluster.contract.records import LeaderRecord
from awide_cluster.contract.registry import Registry, RegistryError
from awide_cluster.contract.report import HostReport
from awide_cluster.contract.untrusted import clean_text
from awide_cluster.daemon.arrivals import arrival_news
from awide_cluster.daemon.clock import Clock, SystemClock
from awide_cluster.daemon.leader import LeaderLoop, Outcome
from awide_cluster.daemon.lease import (
    HostLease,
    KeyAction,
    KeySeen,
    Leadership,
    key_seen,
    on_leader_key,
)
from awide_cluster.daemon.metered import MeteredStore
from awide_cluster.daemon.reconcile import Policy
from awide_cluster.daemon.reporter import (
    CardObserver,
    LocalObserver,
    build_report,
    local_card_id,
    observe_all,
)
from awide_cluster.nvme.runner import CommandRunner
from awide_cluster.store.build import store_from
from awide_cluster.store.errors import (
    StoreError,
    ValueTooLarge,
    WatchMessageTooLarge,
    refusal_reason,
)
from awide_cluster.store.etcd import EtcdStore
from awide_cluster.store.port import Store
from awide_cluster.store.types import Member, WatchBatch
from awide_cluster.store.watch import Watch

if TYPE_CHECKING:
    from awide_cluster.api.notify import Notifier
    from awide_cluster.api.server import DaemonApi

log = logging.getLogger("awide_cluster.daemon")

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_CLUSTER = 0, 1, 2, 3

# a leader record is at most 4 KiB (base64 in the event): a message over this is refused unread
# (the watch skips it and the daemon reads the key instead, bounded like its poll's read)
LEADER_WATCH_MESSAGE_BYTES = 64 * 1024
# a members/ watch message holds a few reports (base64 in the event): over this it is not
# looked at (a report cycle runs, its read bounded like the poll's)
REPORTS_WATCH_MESSAGE_BYTES = 4 * bounds.REPORT_MAX_BYTES * 4 // 3 + 64 * 1024
# the etcd member list is read again this often while running (seconds)
MEMBERS_RECHECK = 60.0
# report cycles are at least this share of a poll interval apart (a burst of arrivals, or a
# writer that rewrites its report in a loop, costs at most 1/gap reads per poll)
REPORT_CYCLE_GAP = 0.05


def voting(members: tuple[Member, ...]) -> int:
    """How many of the members vote (learners do not)."""
    return sum(1 for m in members if not m.is_learner)


class ClusterTooSmall(RuntimeError):
    """The etcd cluster has fewer than 3 members and the config does not say dev_cluster."""


def store_for(cfg: DaemonConfig) -> EtcdStore:
    """The EtcdStore a config describes (keys relative to the cluster prefix)."""
    return store_from(cfg.etcd, cfg.cluster)


def policy_for(cfg: DaemonConfig) -> Policy:
    return Policy(cluster=cfg.cluster, leader=cfg.host, sick_polls=cfg.timing.sick_polls,
                  healthy_polls=cfg.timing.healthy_polls, hosts=frozenset(cfg.hosts))


class Daemon:
    def __init__(self, config: DaemonConfig, *, store: Store | None = None,
                 observer: CardObserver | None = None, runner: CommandRunner | None = None,
                 clock: Clock | None = None, config_path: str | Path | None = None,
                 serve_api: bool = True, notifier: Notifier | None = None,
                 version: str = __version__) -> None:
        from awide_cluster.api.health import DaemonHealth
        from awide_cluster.api.metrics import DaemonMetrics
        from awide_cluster.api.notify import Notifier
        self.config = config
        self.config_path = config_path
        self.clock = clock or SystemClock()
        self._own_store = store is None
        self.metrics = DaemonMetrics(host=config.host, role=config.role, version=version,
                                     cluster=config.cluster)
        self._metered = MeteredStore(store if store is not None else store_for(config),
                                     self.metrics)
        self.store: Store = self._metered
        self._own_observer = observer is None
        self._runner = runner
        self.observer = observer if observer is not None else self._local_observer(config)
        self.version = version
        self.run_id = uuid.uuid4().hex[:12]
        self.seq = 0
        call = config.etcd.call_timeout
        self.lease = HostLease(self.store, self.clock, ttl=config.timing.lease_ttl,
                               call_timeout=call)
        self.leadership = Leadership(self.store, self.lease, self.clock, host=config.host,
                                     run=self.run_id, call_timeout=call)
        self.health = DaemonHealth.for_timing(config.timing.poll_interval, call,
                                              clock=self.clock.monotonic)
        self.leader_loop = LeaderLoop(self.store, self.leadership, self.clock,
                                      policy=policy_for(config), call_timeout=call,
                                      metrics=self.metrics)
        self.notifier = notifier if notifier is not None else Notifier()
        self.serve_api = serve_api
        self.api: DaemonApi | None = None
        self.known_identity: dict[str, str] = {}
        self.report: HostReport | None = None
        self.registry: Registry | None = None
        self._registry_rev = 0
        self._epoch = 0                             # the store's history epoch acted upon
        self.history_resets = 0                     # new etcd histories followed
        self.history_note = ""                      # why the last one was adopted
        self.cluster_size: int | None = None        # voting etcd members, as last read
        self.members_recheck = MEMBERS_RECHECK      # seconds between member-list reads
        self._members_at = 0.0                      # monotonic time of the last read
        self.turns = 0
        self.outcomes: list[Outcome] = []           # last leader outcomes (bounded, for tests)
        self.exit_code: int | None = None
        self.fatal: str = ""
        self._stop = asyncio.Event()
        self._reload: DaemonConfig | str | Path | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready_sent = False
        self._last_error = ""
        self._last_turn_error = ""
        self.turn_errors = 0                        # turns that raised (counted, survived)
        self.write_error: dict[str, str | int] | None = None   # the latest report write failed
        self._electing = asyncio.Lock()     # one campaign at a time: the turn's or the watch's
        self._watch_task: asyncio.Task[None] | None = None
        self._watch_error = ""
        # the open leader-key and members/ watches (their stall bounds follow a reload), and
        # the streams re-opened after a stall or a broken stream by the ones closed before
        self._leader_watch: Watch | None = None
        self._reports_watch: Watch | None = None
        self._leader_reopens = 0
        self._reports_reopens = 0
        self.key_steps: dict[str, int] = {}     # leader-key watch: reads it triggered, by action
        self.key_wins = 0                   # campaigns won on a leader-key watch event
        self._cycling = asyncio.Lock()      # one leader cycle at a time: the turn's or a report's
        self._term = asyncio.Event()        # set while this daemon leads (the reports watch)
        self._reports_task: asyncio.Task[None] | None = None
        self._last_report_cycle = float("-inf")
        self.report_cycles: dict[str, int] = {}  # report cycles run, by outcome (for tests)
        self._reports_error = ""
        self.metrics.bind_watch_reopens(lambda: {"leader": self.leader_watch_reopens,
                                                 "members": self.reports_watch_reopens})

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the API (if asked) and the main loop; returns at once."""
        if self.serve_api and self.api is None:
            from awide_cluster.api.server import ApiTls, DaemonApi
            t = self.config.api.tls
            tls = ApiTls(str(t.cert_file), str(t.key_file), str(t.client_ca_file)) \
                if t is not None else None
            self.api = DaemonApi(health=self.health, metrics=self.metrics, view=self.view,
                                 listen=self.config.api.listen, tls=tls,
                                 allow_insecure=self.config.api.allow_insecure)
            await self.api.start()
            self.leadership.api = self.api.url
        dog = self.notifier.watchdog_interval()
        if dog is not None and 2 * self.config.timing.poll_interval > dog:
            log.warning("systemd watchdog interval %g s is less than two polls (%g s each): "
                        "a slow poll may get the daemon restarted", dog,
                        self.config.timing.poll_interval)
        self._task = asyncio.create_task(self._main(), name=f"awide-daemon-{self.config.host}")

    async def wait(self) -> int:
        """Until the main loop ends (stop or a fatal error); the exit code."""
        if self._task is not None:
            await asyncio.shield(self._task)
        return self.exit_code if self.exit_code is not None else EXIT_OK

    def request_stop(self) -> None:
        self._stop.set()

    def request_reload(self, new: DaemonConfig | str | Path | None = None) -> None:
        """Reload before the next turn: a config object, a file, or the file it started with."""
        self._reload = new if new is not None else (self.config_path or self.config)

    async def stop(self, *, bound: float = 10.0) -> None:
        """Clean stop: finish the current turn, revoke the lease (the report and the leader key
        vanish at once: immediate hand-over), close. Nothing is half-written: every write is
        one etcd call, and the turn in progress is allowed to finish."""
        self._stop.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), bound)
            except TimeoutError:
                log.warning("main loop did not finish its turn within %g s: cancelled", bound)
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
        self.notifier.stopping(status="stopping: revoking lease")
        self.leadership.step_down("stopping (lease revoked: immediate hand-over)",
                                  level=logging.INFO)
        await self.lease.revoke()
        await self._close()

    async def abort(self) -> None:
        """Stop like a crash: no revoke (the lease expires after its TTL). For tests."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._close()

    async def _close(self) -> None:
        if self.api is not None:
            await self.api.stop()
            self.api = None
        if self._own_store:
            await self.store.close()
        self.notifier.close()

    # ------------------------------------------------------------------ main loop

    async def _main(self) -> None:
        try:
            if not await self._check_cluster():
                return
            self._watch_task = asyncio.create_task(
                self._watch_leader(), name=f"awide-leader-watch-{self.config.host}")
            self._reports_task = asyncio.create_task(
                self._watch_reports(), name=f"awide-reports-watch-{self.config.host}")
            # a random phase: hosts started together must not poll in step (their reports
            # would land right at the leader's reads, and etcd would see bursts)
            await self._sleep(random.uniform(0, self.config.timing.poll_interval))
            next_at = self.clock.monotonic()
            while not self._stop.is_set():
                await self._guarded_turn()
                interval = self.config.timing.poll_interval
                next_at += interval
                now = self.clock.monotonic()
                if next_at < now:               # overran: start again now, keep the phase
                    next_at = now
                await self._sleep(next_at - now)
        except ClusterTooSmall as e:
            self.fatal, self.exit_code = str(e), EXIT_CLUSTER
            log.error("%s", e)
        except Exception as e:               # a bug: say so and exit non-zero
            self.fatal, self.exit_code = f"{type(e).__name__}: {e}", EXIT_FAILED
            log.exception("daemon main loop failed")
        finally:
            for task in (self._watch_task, self._reports_task):
                if task is not None:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
            self._watch_task = self._reports_task = None

    async def _guarded_turn(self) -> None:
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
            self._note_error(f"turn failed: {why}")
            self.health.etcd_failed(f"turn failed: {why}")
            self.health.beat()
            self.notifier.watchdog()

    async def _sleep(self, seconds: float) -> None:
        """Until ``seconds`` passed on the daemon's clock, or a stop was asked."""
        if seconds <= 0 or self._stop.is_set():
            return
        stop = asyncio.ensure_future(self._stop.wait())
        nap = asyncio.ensure_future(self.clock.sleep(seconds))
        try:
            await asyncio.wait({stop, nap}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for f in (stop, nap):
                f.cancel()
            await asyncio.gather(stop, nap, return_exceptions=True)

    async def _check_cluster(self) -> bool:
        """Refuse an etcd cluster of fewer than 3 members unless dev_cluster. Retries (each
        call bounded) until etcd answers or the daemon is stopped."""
        while not self._stop.is_set():
            try:
                members = await self.store.members(timeout=self.config.etcd.call_timeout)
            except StoreError as e:
                self._note_error(f"etcd member list: {e}")
                self.health.etcd_failed(str(e))
                self.health.beat()
                self.notifier.watchdog()
                await self._sleep(self.config.timing.poll_interval)
                continue
            n = self.cluster_size = voting(members)
            self._members_at = self.clock.monotonic()
            self.metrics.etcd_voting_members.set(n)
            if n < 3 and not self.config.dev_cluster:
                raise ClusterTooSmall(
                    f"etcd cluster has {n} member(s): a card cluster needs 3 or more to survive "
                    "the loss of a host (set dev_cluster: true for a development cluster)")
            if self.config.dev_cluster:
                log.warning("DEVELOPMENT CLUSTER (dev_cluster: true): etcd has %d member(s); "
                            "this cluster is not fit for production", n)
            return True
        return False

    async def turn(self) -> None:
        """One poll. Never raises for etcd or card trouble (counted, logged)."""
        start = self.clock.monotonic()
        if self._reload is not None:
            await self._apply_reload()
        self._history_check()
        lease_ok = await self._renew_lease()
        observations = await self._observe_cards()
        report_failure = await self._write_report(observations)
        self._history_check()
        had_key = self.leadership.has_key
        elected_ok = await self._elect()
        if self.leadership.has_key:
            led_ok = await self._lead(report_failure)
        else:
            if had_key:
                self.leader_loop.reset(known=self.registry)
            led_ok = await self._follow()
        if self.leadership.has_key:
            self._term.set()
        else:
            self._term.clear()
        holder = self.leadership.holder
        self.metrics.observe_leader(holder.host if holder else None,
                                    me=self.leadership.has_key)
        if self.clock.monotonic() - self._members_at >= self.members_recheck:
            await self._recheck_members()
        self._heartbeat(lease_ok and not report_failure and elected_ok and led_ok, start)

    def _history_check(self) -> None:
        """Act once on a new etcd history the store adopted (a restored or rebuilt etcd,
        store/timeline.py): counted, logged, shown in /v1/status (``etcd_history_reset``); the
        registry revision followed is forgotten (the registry is kept), and leadership is won
        again in the new history; the leader then republishes the registry it holds if etcd's
        is missing, older or of another lineage (LeaderLoop, ``history_reset``)."""
        epoch = self.store.timeline_epoch
        if epoch == self._epoch:
            return
        self._epoch = epoch
        self.history_resets += 1
        self.history_note = clean_text(self.store.timeline_note, 300)
        self.metrics.etcd_history_resets.inc()
        held = self.registry.generation if self.registry is not None else None
        timing = self.config.timing
        log.warning("%s: etcd history changed: %s; keeping registry generation %s and "
                    "campaigning again; a registry to republish waits %g s for the gateways' "
                    "records", self.config.host, self.history_note, held,
                    timing.lease_ttl + 2 * timing.poll_interval)
        self._registry_rev = 0
        self.leader_loop.history_reset = True
        # gateways notice within a poll or two, then rewrite their records (a lease granted
        # again when the new history does not know theirs): the republished generation must be
        # above what they applied, and only their records say what that was
        self.leader_loop.hold_repair_until = (self.clock.monotonic() + timing.lease_ttl
                                              + 2 * timing.poll_interval)
        if self.leadership.has_key:
            self.leadership.history_reset()
            self.leader_loop.reset(known=self.registry)
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
            self._note_error(f"lease: {e}")
        if self.leadership.has_key and not self.lease.valid():
            self.leadership.step_down(
                f"lease not confirmed for {self.lease.ttl - self.lease.remaining():.1f} s "
                f"(TTL {self.lease.ttl} s, margin {self.lease.margin:g} s)")
        return ok

    async def _observe_cards(self) -> list[CardObservation]:
        """2. Observe the local cards (concurrently, each bounded)."""
        cards = self.config.cards
        observations = await observe_all(self.observer, cards, self.known_identity)
        for spec, obs in zip(cards, observations, strict=True):
            cid = local_card_id(self.config.host, obs, self.registry)
            self.metrics.local_card(cid, spec.name, obs.healthy)
            for p in obs.probes:
                self.metrics.probe_result(cid, spec.name, p.probe, p.ok, p.elapsed)
        return observations

    async def _write_report(self, observations: list[CardObservation]) -> str:
        """3. Write the host report on the lease; why it failed ("" when written or when
        there is no lease to write it on)."""
        cfg = self.config
        self.seq += 1
        self.report = build_report(
            host=cfg.host, role=cfg.role, version=self.version,
            api=self.api.url if self.api is not None else "", run=self.run_id, seq=self.seq,
            dev_cluster=cfg.dev_cluster, specs=cfg.cards, observations=observations,
            history_resets=self.history_resets, history_note=self.history_note)
        if self.lease.id is None:
            return ""
        try:
            await self.store.put(keys.member(cfg.host), reportdoc.encode(self.report),
                                 lease=self.lease.id, timeout=cfg.etcd.call_timeout)
        except StoreError as e:
            failure = f"host report: {e}"[:300]
            self._report_refused(e)
            self._note_error(failure)
            return failure
        self.metrics.report_write(True)
        self.health.report_written()
        self.write_error = None
        return ""

    async def _recheck_members(self) -> None:
        """The member list again (bounded; a failure is tried again a period later): a change
        of the voting members is logged, a count under 3 as a warning (not fatal: the daemon
        keeps its cards reported; docs/operations.md says how to add a member)."""
        self._members_at = self.clock.monotonic()     # a failure waits as long (no retry storm)
        try:
            members = await self.store.members(timeout=self.config.etcd.call_timeout)
        except StoreError as e:
            self._note_error(f"etcd member list: {e}")
            return
        n, was = voting(members), self.cluster_size
        self.cluster_size = n
        self.metrics.etcd_voting_members.set(n)
        if n == was:
            return
        learners = len(members) - n
        also = f" (and {learners} learner(s))" if learners else ""
        if n < 3 and not self.config.dev_cluster:
            log.warning("%s: etcd now has %d voting member(s)%s, was %s: it tolerates no "
                        "member failure; add a member (docs/operations.md)", self.config.host,
                        n, also, was)
        else:
            log.info("%s: etcd now has %d voting member(s)%s, was %s", self.config.host, n,
                     also, was)

    async def _elect(self) -> bool:
        """4a. Campaign for ``leader`` when nobody holds it. False: etcd failed."""
        if self.leadership.has_key or not self.lease.valid():
            return True
        try:
            async with self._electing:
                await self._campaign()
        except StoreError as e:
            self._note_error(f"leader election: {e}")
            return False
        return True

    async def _campaign(self) -> None:
        """Read the leader key; create it on our lease if it is vacant (or ours). The poll's
        and the watch's campaign, under ``_electing``. Raises StoreError."""
        if self.leadership.has_key or not self.lease.valid():
            return
        kv = await self.store.get(keys.LEADER, timeout=self.config.etcd.call_timeout)
        self.leadership.holder = LeaderRecord.decode(kv.value) if kv else None
        # our own key still bound to our (confirmed) lease: we stepped down because
        # the lease went unconfirmed (e.g. etcd lost quorum) but etcd kept it; nobody
        # else can take the key while we renew the lease, so campaign (it adopts the
        # key) instead of leaving the cluster without a leader
        ours = kv is not None and kv.lease == self.lease.id
        if not ours and await self.leadership.clear_orphan(kv, self.config.timing.lease_ttl):
            kv = None
        if (kv is None or ours) and await self.leadership.campaign():
            self.leader_loop.reset(known=self.registry)

    async def _watch_leader(self) -> None:
        """Follow the ``leader`` key with a watch (progress notifications, stall watchdog,
        resumption: ``store.watch``) and act on what ``on_leader_key`` decides. Never ends
        on an error: it is logged once, the watch re-opened after one poll interval, and the
        key read then (events may have been missed meanwhile). The poll covers the gap."""
        missed = False
        while not self._stop.is_set():
            try:
                stall = self.config.timing.leader_watch_stall
                async with self.store.watch(keys.LEADER, stall_after=stall,
                                            max_message_bytes=LEADER_WATCH_MESSAGE_BYTES) as w:
                    self._leader_watch = w
                    if missed:
                        await self._on_leader_key("lost")
                        missed = False
                    while not self._stop.is_set():
                        try:
                            batch = await w.__anext__()
                        except WatchMessageTooLarge as e:
                            self._watch_failed(str(e))
                            await self._on_leader_key("lost")
                            continue
                        except StopAsyncIteration:
                            break
                        await self._on_leader_key(key_seen(batch))
            except StoreError as e:
                self._watch_failed(str(e))
                missed = True
            except Exception as e:      # noqa: BLE001 - the watch must outlive any content
                self._watch_failed(f"{type(e).__name__}: {e}", trace=True)
                missed = True
            finally:
                self._leader_reopens += self._reopened(self._leader_watch)
                self._leader_watch = None
            await self._sleep(self.config.timing.poll_interval if missed else 0)

    @staticmethod
    def _reopened(watch: Watch | None) -> int:
        return watch.reconnects if watch is not None else 0

    @property
    def leader_watch_reopens(self) -> int:
        """Leader-key watch streams re-opened after a stall (no message within
        ``timing.leader_watch_stall``) or a broken stream, since the start."""
        return self._leader_reopens + self._reopened(self._leader_watch)

    @property
    def reports_watch_reopens(self) -> int:
        """The same for the leader's ``members/`` watch (``timing.reports_watch_stall``)."""
        return self._reports_reopens + self._reopened(self._reports_watch)

    def _watch_failed(self, why: str, *, trace: bool = False) -> None:
        why = clean_text(why, 300)
        if why != self._watch_error:
            log.warning("%s: leader key watch: %s; the poll reads the key meanwhile",
                        self.config.host, why, exc_info=trace)
        self._watch_error = why

    async def _on_leader_key(self, seen: KeySeen) -> None:
        """What the leader-key watch showed: decided by ``on_leader_key``; a campaign or a
        read of the key, never the event's value. Never raises for etcd trouble."""
        if self._stop.is_set():
            return
        step = on_leader_key(seen, has_key=self.leadership.has_key,
                             lease_valid=self.lease.valid())
        if seen == "progress":
            return
        host = self.config.host
        log.info("%s: leader key watch saw %s: %s (%s)", host, seen, step.action.value,
                 step.reason)
        if step.action is KeyAction.IGNORE:
            return
        self.key_steps[step.action.value] = self.key_steps.get(step.action.value, 0) + 1
        try:
            async with self._electing:
                if step.action is KeyAction.VERIFY and self.leadership.has_key:
                    kv = await self.store.get(keys.LEADER,
                                              timeout=self.config.etcd.call_timeout)
                    self.leadership.observe_key(kv)
                had = self.leadership.has_key
                if not had and not self._stop.is_set():
                    await self._campaign()
        except StoreError as e:
            log.warning("%s: leader key read on a watch event failed (%s); the next poll "
                        "campaigns", host, clean_text(e, 300))
            return
        self._watch_error = ""
        if self.leadership.has_key and not had:
            self.key_wins += 1
            self._term.set()            # the members/ watch starts now too
            await self._term_cycle()

    async def _term_cycle(self) -> None:
        """A new term's first cycle, right after a campaign won on the watch (the hand-over's
        first fenced write, not after this host's probes and report of its next turn). An
        out-of-turn cycle like a report cycle (``reconcile``: only reports that advanced
        count). Never raises: a failure is logged, the next poll cycle runs as usual."""
        occasion = "the first of a term won on the leader-key watch"
        try:
            await self._report_cycle(occasion, trigger="term", occasion=occasion)
        except Exception as e:      # noqa: BLE001 - the watch must outlive a failed cycle
            why = clean_text(f"{type(e).__name__}: {e}", 300)
            self.metrics.loop_error(type(e).__name__)
            log.exception("%s: first cycle of the new term failed, the next poll cycle runs "
                          "as usual: %s", self.config.host, why)

    async def _lead(self, report_failure: str) -> bool:
        """4b. One leader cycle (told whether this turn's report write failed). False: it
        read or wrote nothing."""
        async with self._cycling:
            outcome = await self.leader_loop.cycle(write_failure=report_failure)
        self.metrics.leader_cycles.labels(trigger="poll").inc()
        self.outcomes = (self.outcomes + [outcome])[-50:]
        if self.leader_loop.registry is not None:
            self.registry = self.leader_loop.registry
        return outcome not in (Outcome.SKIPPED, Outcome.ERROR)

    async def _watch_reports(self) -> None:
        """While this daemon leads, follow ``members/`` with a watch and run a report cycle
        for a report that says something new (``arrivals.arrival_news``). Never ends on an
        error: logged once, re-opened after one poll interval; the poll cycles go on."""
        while not self._stop.is_set():
            await self._until_leading()
            if self._stop.is_set():
                return
            try:
                async with self.store.watch(keys.MEMBERS, prefix=True,
                                            stall_after=self.config.timing.reports_watch_stall,
                                            max_message_bytes=REPORTS_WATCH_MESSAGE_BYTES) as w:
                    self._reports_watch = w
                    while self._term.is_set() and not self._stop.is_set():
                        try:
                            batch = await w.__anext__()
                        except WatchMessageTooLarge as e:
                            await self._report_cycle(f"a members/ watch message not looked "
                                                     f"at: {e}")
                            continue
                        except StopAsyncIteration:
                            break
                        why = self._news(batch)
                        if why:
                            await self._report_cycle(why)
            except StoreError as e:
                self._reports_watch_failed(str(e))
                await self._sleep_plain(self.config.timing.poll_interval)
            except Exception as e:      # noqa: BLE001 - the watch must outlive any content
                self._reports_watch_failed(f"{type(e).__name__}: {e}", trace=True)
                await self._sleep_plain(self.config.timing.poll_interval)
            finally:
                self._reports_reopens += self._reopened(self._reports_watch)
                self._reports_watch = None

    def _news(self, batch: WatchBatch) -> str:
        """Why one of the batch's reports may change the registry, "" if none may."""
        loop = self.leader_loop
        for ev in batch.events:
            if ev.kind != "put":
                continue        # a report gone: the poll cycle counts it
            why = arrival_news(ev.kv.key, ev.kv.value, loop.registry, loop.memory.seen,
                               loop.reports, loop.policy.hosts, loop.reports_memo.decode)
            if why:
                return why
        return ""

    async def _until_leading(self) -> None:
        if self._term.is_set() or self._stop.is_set():
            return
        stop = asyncio.ensure_future(self._stop.wait())
        term = asyncio.ensure_future(self._term.wait())
        try:
            await asyncio.wait({stop, term}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for f in (stop, term):
                f.cancel()
            await asyncio.gather(stop, term, return_exceptions=True)

    async def _sleep_plain(self, seconds: float) -> None:
        """Until ``seconds`` passed (real time, not the daemon's clock) or a stop was asked."""
        try:
            await asyncio.wait_for(self._stop.wait(), seconds)
        except TimeoutError:
            pass

    async def _report_cycle(self, why: str, *, trigger: Literal["report", "term"] = "report",
                            occasion: str = "") -> None:
        """One leader cycle started by a report's arrival (or, ``trigger`` "term", by a
        campaign won on the watch), at least ``REPORT_CYCLE_GAP`` of a poll after the last
        one, never beside the turn's cycle."""
        gap = REPORT_CYCLE_GAP * self.config.timing.poll_interval
        wait = self._last_report_cycle + gap - self.clock.monotonic()
        if wait > 0:
            await self._sleep_plain(wait)
        async with self._cycling:
            if not self.leadership.has_key or self._stop.is_set():
                return
            self._last_report_cycle = self.clock.monotonic()
            log.debug("%s: %s cycle: %s", self.config.host, trigger, clean_text(why, 300))
            outcome = await self.leader_loop.cycle(trigger="report", occasion=occasion)
        self.metrics.leader_cycles.labels(trigger=trigger).inc()
        self.report_cycles[outcome.value] = self.report_cycles.get(outcome.value, 0) + 1
        self.outcomes = (self.outcomes + [outcome])[-50:]
        if self.leader_loop.registry is not None:
            self.registry = self.leader_loop.registry
        self._reports_error = ""

    def _reports_watch_failed(self, why: str, *, trace: bool = False) -> None:
        why = clean_text(why, 300)
        if why != self._reports_error:
            log.warning("%s: members/ watch: %s; the poll cycles go on", self.config.host, why,
                        exc_info=trace)
        self._reports_error = why

    def _heartbeat(self, etcd_ok: bool, start: float) -> None:
        """5. Health marks, the systemd watchdog (and readiness once), the poll's figures."""
        if etcd_ok:
            self.health.etcd_ok()
            self._last_error = ""
        else:
            self.health.etcd_failed(self._last_error or "etcd call failed")
        self.health.beat()
        self.notifier.watchdog()
        if not self._ready_sent and self.report is not None and etcd_ok:
            self._ready_sent = True
            self.notifier.ready(status=f"reporting {len(self.config.cards)} card(s)")
        self.turns += 1
        self.metrics.poll_done(self.clock.monotonic() - start, ok=etcd_ok)

    async def _follow(self) -> bool:
        """A follower's read of the registry (only when it changed), for the status view."""
        try:
            after = self._registry_rev + 1 if self._registry_rev else None
            kv = await self.store.get(keys.REGISTRY, min_mod_revision=after,
                                      timeout=self.config.etcd.call_timeout,
                                      max_value_bytes=bounds.REGISTRY_MAX_BYTES)
        except ValueTooLarge as e:      # refused like a corrupt one; that revision not again
            self.metrics.registry_refused("too_large")
            self._note_error(f"registry unreadable, keeping the last good one: {e}")
            self._registry_rev = e.mod_revision or self._registry_rev
            return True
        except StoreError as e:
            self._note_error(f"registry read: {e}")
            return False
        if kv is not None:
            try:
                reg = regdoc.decode(kv.value)
                back = regdoc.went_back(self.registry, reg)
                if back is not None:
                    raise RegistryError(back)
                if self.registry is not None and reg.lineage != self.registry.lineage:
                    log.warning("registry lineage changed from %s to %s at generation %d",
                                self.registry.lineage or "-", reg.lineage or "-",
                                reg.generation)
                self.registry = reg
                self.metrics.observe_registry(self.registry)
            except RegistryError as e:
                self.metrics.registry_refused("corrupt")
                self._note_error(f"registry unreadable, keeping the last good one: {e}")
            self._registry_rev = kv.mod_revision
        return True

    def _report_refused(self, e: StoreError) -> None:
        reason = refusal_reason(e)
        self.metrics.report_write(False)
        self.metrics.write_refused("report", reason)
        self.health.write_refused(f"{reason}: {e}"[:300])
        n = int(self.write_error["in_a_row"]) + 1 if self.write_error else 1
        self.write_error = {"write": "report", "reason": reason, "error": str(e)[:300],
                            "in_a_row": n}

    def _note_error(self, text: str) -> None:
        if text != self._last_error:
            log.warning("%s", text)
        self._last_error = text

    # ------------------------------------------------------------------ reload (SIGHUP)

    def _reload_credentials(self) -> None:
        """Read the etcd credential files again; a bad one is refused in one line naming it,
        and the credentials in use stay."""
        from awide_cluster.store.credentials import CredentialError
        try:
            what = self._metered.reload_credentials()
        except CredentialError as e:
            log.error("credentials reload refused, keeping the ones in use: %s", e)
        else:
            log.info("%s", what)
        if self.api is not None and self.api.tls is not None:
            try:
                log.info("%s", self.api.reload_tls())
            except CredentialError as e:
                log.error("API certificate reload refused, keeping the one in use: %s", e)

    async def _apply_reload(self) -> None:
        source, self._reload = self._reload, None
        self._reload_credentials()          # the files, even when the config itself is refused
        try:
            if source is None:
                return
            new = source if isinstance(source, DaemonConfig) else daemon_config.load(source)
        except ConfigError as e:
            log.error("reload refused, keeping the running config: %s", e)
            return
        fixed = daemon_config.reload_problems(self.config, new)
        if fixed:
            log.error("reload refused, keeping the running config: %s cannot change without "
                      "a restart", ", ".join(fixed))
            return
        old = self.config
        self.config = new
        self.leader_loop.policy = policy_for(new)
        poll, call = new.timing.poll_interval, new.etcd.call_timeout
        self.health.loop_stale_after = 3 * poll + 4 * call        # as DaemonHealth.for_timing
        self.health.report_stale_after = 3 * poll + 2 * call
        # the open watches wait for their next message under the new bounds
        if self._leader_watch is not None:
            self._leader_watch.stall_after = new.timing.leader_watch_stall
        if self._reports_watch is not None:
            self._reports_watch.stall_after = new.timing.reports_watch_stall
        self.known_identity.clear()         # an operator reload accepts the cards as they are
        if self._own_observer and (new.sysfs_root, new.nvme_program) != \
                (old.sysfs_root, old.nvme_program):
            self.observer = self._local_observer(new)
        log.info("config reloaded: %d card(s), poll %g s, lease TTL %d s, sick after %d polls",
                 len(new.cards), new.timing.poll_interval, new.timing.lease_ttl,
                 new.timing.sick_polls)
        if new.timing.lease_ttl != old.timing.lease_ttl:
            await self._change_lease(new.timing.lease_ttl)

    async def _change_lease(self, ttl: int) -> None:
        """Move the report and the leader key to a lease with the new TTL, keeping leadership
        (the leader key's create_revision does not change), then revoke the old lease."""
        try:
            old = await self.lease.replace(ttl)
            if self.lease.id is not None:
                await self.leadership.move_to_lease(self.lease.id)
        except StoreError as e:
            log.warning("lease TTL change incomplete (%s): the next turn grants what is missing",
                        e)
            return
        if old is not None:
            try:
                await self.store.revoke(old, timeout=self.config.etcd.call_timeout)
            except StoreError as e:
                log.warning("old lease %x not revoked (%s): it expires after its TTL", old, e)

    def _local_observer(self, cfg: DaemonConfig) -> CardObserver:
        from awide_cluster.nvme.runner import Runner
        from awide_cluster.nvme.sysfs import Sysfs
        runner = self._runner if self._runner is not None else Runner()
        return LocalObserver(runner, Sysfs(cfg.sysfs_root), self.clock,
                             nvme_program=cfg.nvme_program)

    # ------------------------------------------------------------------ status

    @property
    def is_leader(self) -> bool:
        return self.leadership.is_leader

    def view(self) -> dict[str, Any]:
        from awide_cluster.api.view import host_view
        holder = self.leadership.holder
        extra = {
            "cluster": self.config.cluster,
            "dev_cluster": self.config.dev_cluster,
            "etcd_members": self.cluster_size,
            "etcd_too_small": (self.cluster_size is not None and self.cluster_size < 3
                               and not self.config.dev_cluster),
            "lease": f"{self.lease.id:x}" if self.lease.id else None,
            "error": self._last_error or None,
            "leader_error": self.leader_loop.last_error or None,
            "write_error": dict(self.write_error) if self.write_error else None,
            "write_outage": (self.leader_loop.outage or None) if self.is_leader else None,
            "etcd_history_reset": ({"count": self.history_resets, "note": self.history_note}
                                   if self.history_resets else None),
        }
        if self.config.dev_cluster:
            extra["warning"] = ("DEVELOPMENT CLUSTER: dev_cluster is true; etcd has "
                                f"{self.cluster_size} member(s)")
        return host_view(host=self.config.host, role=self.config.role, version=self.version,
                         report=self.report, registry=self.registry,
                         leader=holder.host if holder else None, is_leader=self.is_leader,
                         extra=extra)


async def run_daemon(config_path: str | Path, *, install_signals: bool = True) -> int:
    """``awide-cluster run``: load, start, run until SIGTERM/SIGINT; SIGHUP reloads.
    The exit code: 0 clean stop, 2 bad config, 3 etcd cluster too small, 1 other failure."""
    import signal
    try:
        cfg = daemon_config.load(config_path)
    except ConfigError as e:
        log.error("%s", e)
        return EXIT_CONFIG
    d = Daemon(cfg, config_path=config_path)
    loop = asyncio.get_running_loop()
    if install_signals:
        loop.add_signal_handler(signal.SIGTERM, d.request_stop)
        loop.add_signal_handler(signal.SIGINT, d.request_stop)
        loop.add_signal_handler(signal.SIGHUP, d.request_reload)
    try:
        await d.start()
    except Exception as e:
        log.error("cannot start: %s", e)
        await d._close()
        return EXIT_FAILED
    log.info("awide-cluster %s running: cluster %s, host %s (%s), %d card(s), run %s",
             d.version, cfg.cluster, cfg.host, cfg.role, len(cfg.cards), d.run_id)
    code = await d.wait()
    await d.stop()
    return code
