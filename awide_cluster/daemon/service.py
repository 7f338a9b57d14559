"""The daemon: its composition root and lifecycle, what ``awide-cluster run`` drives.

``Daemon`` builds the parts from a config and wires them; each part has one job:

- ``turn.TurnLoop``: one turn per poll (lease, card probes, host report, campaign, a leader's
  poll cycle or a follower's registry read, heartbeat);
- ``cycles.CycleRunner``: leader cycles one at a time, the turn's and the out-of-turn ones;
- ``election.Election``: the campaign for the ``leader`` key;
- ``leader_watch.LeaderKeyWatch``: the watch of the ``leader`` key (a vacated key is
  campaigned for at once, a won term's first cycle runs right away);
- ``reports_watch.ReportsWatch``: while leading, the watch of ``members/`` (a report cycle on
  a report's arrival);
- ``reload.Reload``: SIGHUP (credentials, config, lease TTL);
- ``probes.CardProbes``, ``registry_follow.RegistryFollow``, ``etcd_members.EtcdMembers``;
- ``shared.DaemonShared``: what they share (config in force, registry known, stop, term).

The demo and tests start it in-process (``await d.start()`` ... ``await d.stop()``);
``abort()`` drops it like a crash (no revoke).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from awide_cluster import __version__
from awide_cluster.config import daemon as daemon_config
from awide_cluster.config.common import ConfigError
from awide_cluster.config.daemon import DaemonConfig
from awide_cluster.contract.registry import Registry
from awide_cluster.contract.report import HostReport
from awide_cluster.daemon.clock import Clock, SystemClock
from awide_cluster.daemon.cycles import CycleRunner
from awide_cluster.daemon.election import Election
from awide_cluster.daemon.etcd_members import ClusterTooSmall, EtcdMembers
from awide_cluster.daemon.leader import CycleOutcome, LeaderLoop
from awide_cluster.daemon.leader_watch import LeaderKeyWatch
from awide_cluster.daemon.lease import HostLease, Leadership
from awide_cluster.daemon.metered import MeteredStore
from awide_cluster.daemon.probes import CardProbes
from awide_cluster.daemon.registry_follow import RegistryFollow
from awide_cluster.daemon.reload import Reload
from awide_cluster.daemon.reporter import CardObserver
from awide_cluster.daemon.reports_watch import ReportsWatch
from awide_cluster.daemon.restart import mark_restarting
from awide_cluster.daemon.shared import DaemonShared, policy_for
from awide_cluster.daemon.turn import TurnLoop
from awide_cluster.nvme.runner import CommandRunner
from awide_cluster.store.build import store_from
from awide_cluster.store.etcd import EtcdStore
from awide_cluster.store.port import Store

if TYPE_CHECKING:
    from awide_cluster.api.notify import Notifier
    from awide_cluster.api.server import DaemonApi

log = logging.getLogger("awide_cluster.daemon")

# 78: sysexits' EX_CONFIG, as the CLI's config errors (the unit does not restart on it)
EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_CLUSTER = 0, 1, 78, 3


def store_for(cfg: DaemonConfig) -> EtcdStore:
    """The EtcdStore a config describes (keys relative to the cluster prefix)."""
    return store_from(cfg.etcd, cfg.cluster)


class Daemon:
    def __init__(self, config: DaemonConfig, *, store: Store | None = None,
                 observer: CardObserver | None = None, runner: CommandRunner | None = None,
                 clock: Clock | None = None, config_path: str | Path | None = None,
                 serve_api: bool = True, notifier: Notifier | None = None,
                 version: str = __version__) -> None:
        from awide_cluster.api.health import DaemonHealth
        from awide_cluster.api.metrics import DaemonMetrics
        from awide_cluster.api.notify import Notifier
        self.config_path = config_path
        self.clock = clock or SystemClock()
        self.shared = DaemonShared(config, self.clock)
        self._own_store = store is None
        self.metrics = DaemonMetrics(host=config.host, role=config.role, version=version,
                                     cluster=config.cluster)
        self._metered = MeteredStore(store if store is not None else store_for(config),
                                     self.metrics)
        self.store: Store = self._metered
        self.version = version
        self.run_id = uuid.uuid4().hex[:12]
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
        self.exit_code: int | None = None
        self.fatal: str = ""
        self._task: asyncio.Task[None] | None = None
        self._watch_tasks: tuple[asyncio.Task[None], ...] = ()
        # the parts (see the module's docstring)
        shared = self.shared
        self.probes = CardProbes(config, self.clock, self.metrics, observer=observer,
                                 runner=runner)
        self.cycles = CycleRunner(shared, self.leader_loop, self.leadership, self.metrics)
        self.election = Election(shared, self.store, self.lease, self.leadership,
                                 self.leader_loop)
        self.reports_watch = ReportsWatch(shared, self.store, self.leader_loop, self.cycles,
                                          self.metrics)
        self.leader_watch = LeaderKeyWatch(shared, self.store, self.lease, self.leadership,
                                           self.election, on_won=self.reports_watch.term_cycle)
        self.members = EtcdMembers(shared, self.store, self.metrics, self.health,
                                   self.notifier)
        self.follow = RegistryFollow(shared, self.store, self.metrics)
        self.reload = Reload(shared, self._metered, lease=self.lease,
                             leadership=self.leadership, leader_loop=self.leader_loop,
                             health=self.health, probes=self.probes,
                             leader_watch=self.leader_watch, reports_watch=self.reports_watch,
                             api=lambda: self.api, config_path=config_path)
        self.turns_loop = TurnLoop(
            shared, self.store, lease=self.lease, leadership=self.leadership,
            leader_loop=self.leader_loop, metrics=self.metrics, health=self.health,
            notifier=self.notifier, probes=self.probes, election=self.election,
            cycles=self.cycles, follow=self.follow, members=self.members, reload=self.reload,
            api_url=lambda: self.api.url if self.api is not None else "",
            version=version, run_id=self.run_id)
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
        self.shared.stop.set()

    def request_reload(self, new: DaemonConfig | str | Path | None = None) -> None:
        """Reload before the next turn: a config object, a file, or the file it started with."""
        self.reload.request(new)

    async def stop(self, *, bound: float = 10.0) -> None:
        """Clean stop: finish the current turn, write the last report again marked restarting
        on a lease of ``timing.restart_grace`` (``restart.mark_restarting``: its cards are held
        until then) in a transaction that also deletes the leader key if this daemon holds it
        (fenced on its create_revision: the immediate hand-over), revoke the lease, close.
        Nothing is half-written: every write is one etcd call, and the turn in progress is
        allowed to finish."""
        self.shared.stop.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), bound)
            except TimeoutError:
                log.warning("main loop did not finish its turn within %g s: cancelled", bound)
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
        self.notifier.stopping(status="stopping: revoking lease")
        if self.lease.id is not None:
            # a leader's key is deleted in the transaction that marks its report: the
            # hand-over starts there, not after the lease's revoke
            token = self.leadership.revision if self.leadership.has_key else None
            _, resigned = await mark_restarting(
                self.store, self.report, grace=self.config.timing.restart_grace,
                wall=self.clock.wall(), call_timeout=self.config.etcd.call_timeout,
                leader_revision=token)
            if resigned:
                self.leadership.step_down("stopping (leader key deleted: immediate hand-over)",
                                          level=logging.INFO)
        self.leadership.step_down("stopping (lease revoked: immediate hand-over)",
                                  level=logging.INFO)
        await self.lease.revoke()
        await self.close()

    async def abort(self) -> None:
        """Stop like a crash: no revoke (the lease expires after its TTL). For tests."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.close()

    async def close(self) -> None:
        """The API stopped, the store closed (when the daemon built it), the notifier closed."""
        if self.api is not None:
            await self.api.stop()
            self.api = None
        if self._own_store:
            await self.store.close()
        self.notifier.close()

    async def _main(self) -> None:
        """Check the etcd cluster, start the watches, run the turns until a stop or a fatal
        error (its exit code kept)."""
        host = self.config.host
        try:
            if not await self.members.check():
                return
            self._watch_tasks = (
                asyncio.create_task(self.leader_watch.run(), name=f"awide-leader-watch-{host}"),
                asyncio.create_task(self.reports_watch.run(),
                                    name=f"awide-reports-watch-{host}"))
            await self.turns_loop.run()
        except ClusterTooSmall as e:
            self.fatal, self.exit_code = str(e), EXIT_CLUSTER
            log.error("%s", e)
        except Exception as e:               # a bug: say so and exit non-zero
            self.fatal, self.exit_code = f"{type(e).__name__}: {e}", EXIT_FAILED
            log.exception("daemon main loop failed")
        finally:
            for task in self._watch_tasks:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            self._watch_tasks = ()

    @property
    def running(self) -> bool:
        """The main loop runs (started, not ended)."""
        return self._task is not None and not self._task.done()

    @property
    def watches_running(self) -> bool:
        """Both watch tasks (leader key, ``members/``) run."""
        return len(self._watch_tasks) == 2 and not any(t.done() for t in self._watch_tasks)

    async def turn(self) -> None:
        """One turn, outside the main loop (tests drive turns one by one)."""
        await self.turns_loop.turn()

    # ------------------------------------------------------------------ what the parts hold

    @property
    def config(self) -> DaemonConfig:
        """The config in force (a reload swaps it)."""
        return self.shared.config

    @property
    def registry(self) -> Registry | None:
        return self.shared.registry

    @property
    def report(self) -> HostReport | None:
        return self.turns_loop.report

    @property
    def seq(self) -> int:
        return self.turns_loop.seq

    @property
    def turns(self) -> int:
        return self.turns_loop.turns

    @property
    def turn_errors(self) -> int:
        return self.turns_loop.turn_errors

    @property
    def write_error(self) -> dict[str, str | int] | None:
        return self.turns_loop.write_error

    @property
    def history_resets(self) -> int:
        return self.turns_loop.history_resets

    @property
    def history_note(self) -> str:
        return self.turns_loop.history_note

    @property
    def cluster_size(self) -> int | None:
        return self.members.cluster_size

    @property
    def members_recheck(self) -> float:
        return self.members.recheck_every

    @members_recheck.setter
    def members_recheck(self, seconds: float) -> None:
        self.members.recheck_every = seconds

    @property
    def outcomes(self) -> list[CycleOutcome]:
        return self.cycles.outcomes

    @property
    def report_cycles(self) -> dict[str, int]:
        return self.cycles.report_cycles

    @property
    def key_steps(self) -> dict[str, int]:
        return self.leader_watch.key_steps

    @property
    def key_wins(self) -> int:
        return self.leader_watch.key_wins

    @property
    def leader_watch_reopens(self) -> int:
        """Leader-key watch streams re-opened after a stall (no message within
        ``timing.leader_watch_stall``) or a broken stream, since the start."""
        return self.leader_watch.reopens

    @property
    def reports_watch_reopens(self) -> int:
        """The same for the leader's ``members/`` watch (``timing.reports_watch_stall``)."""
        return self.reports_watch.reopens

    # ------------------------------------------------------------------ status

    @property
    def is_leader(self) -> bool:
        return self.leadership.is_leader

    def view(self) -> dict[str, Any]:
        from awide_cluster.api.view import host_view
        cfg, holder, size = self.config, self.leadership.holder, self.cluster_size
        write_error = self.write_error
        extra = {
            "cluster": cfg.cluster,
            "dev_cluster": cfg.dev_cluster,
            "etcd_members": size,
            "etcd_too_small": size is not None and size < 3 and not cfg.dev_cluster,
            "lease": f"{self.lease.id:x}" if self.lease.id else None,
            "error": self.shared.last_error or None,
            "leader_error": self.leader_loop.last_error or None,
            "write_error": dict(write_error) if write_error else None,
            "write_outage": (self.leader_loop.outage or None) if self.is_leader else None,
            "etcd_history_reset": ({"count": self.history_resets, "note": self.history_note}
                                   if self.history_resets else None),
        }
        if cfg.dev_cluster:
            extra["warning"] = ("DEVELOPMENT CLUSTER: dev_cluster is true; etcd has "
                                f"{size} member(s)")
        return host_view(host=cfg.host, role=cfg.role, version=self.version,
                         report=self.report, registry=self.registry,
                         leader=holder.host if holder else None, is_leader=self.is_leader,
                         extra=extra)


async def run_daemon(config_path: str | Path, *, install_signals: bool = True) -> int:
    """``awide-cluster run``: load, start, run until SIGTERM/SIGINT; SIGHUP reloads.
    The exit code: 0 clean stop, 78 bad config, 3 etcd cluster too small, 1 other failure."""
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
        await d.close()
        return EXIT_FAILED
    log.info("awide-cluster %s running: cluster %s, host %s (%s), %d card(s), run %s",
             d.version, cfg.cluster, cfg.host, cfg.role, len(cfg.cards), d.run_id)
    code = await d.wait()
    await d.stop()
    return code
