"""Reload (SIGHUP): the credential files, then the config, applied before the next turn.

A bad credential file is refused in one line naming it and the credentials in use stay; a
config that does not load, or that changes what needs a restart
(``config.daemon.reload_problems``), is refused and the running config stays. An accepted
config reaches every part: the decision policy, the health bounds, the open watches' stall
bounds, the card probes, and the host lease when its TTL changed (the report and the leader
key move to a new lease, keeping leadership).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from awide_cluster.config import daemon as daemon_config
from awide_cluster.config.common import ConfigError
from awide_cluster.config.daemon import DaemonConfig
from awide_cluster.daemon.leader import LeaderLoop
from awide_cluster.daemon.leader_watch import LeaderKeyWatch
from awide_cluster.daemon.lease import HostLease, Leadership
from awide_cluster.daemon.metered import MeteredStore
from awide_cluster.daemon.probes import CardProbes
from awide_cluster.daemon.reports_watch import ReportsWatch
from awide_cluster.daemon.shared import DaemonShared, policy_for
from awide_cluster.store.errors import StoreError

if TYPE_CHECKING:
    from awide_cluster.api.health import DaemonHealth
    from awide_cluster.api.server import DaemonApi

log = logging.getLogger("awide_cluster.daemon")


class Reload:
    def __init__(self, shared: DaemonShared, store: MeteredStore, *, lease: HostLease,
                 leadership: Leadership, leader_loop: LeaderLoop, health: DaemonHealth,
                 probes: CardProbes, leader_watch: LeaderKeyWatch, reports_watch: ReportsWatch,
                 api: Callable[[], DaemonApi | None],
                 config_path: str | Path | None = None) -> None:
        self.shared, self.store, self.lease, self.leadership = shared, store, lease, leadership
        self.leader_loop, self.health, self.probes = leader_loop, health, probes
        self.leader_watch, self.reports_watch, self.api = leader_watch, reports_watch, api
        self.config_path = config_path
        self.pending: DaemonConfig | str | Path | None = None

    def request(self, new: DaemonConfig | str | Path | None = None) -> None:
        """Reload before the next turn: a config object, a file, or the file it started with."""
        self.pending = new if new is not None else (self.config_path or self.shared.config)

    async def apply_pending(self) -> None:
        """The reload requested, if any (the turn's first step)."""
        if self.pending is not None:
            await self._apply()

    def _reload_credentials(self) -> None:
        """Read the etcd credential files again; a bad one is refused in one line naming it,
        and the credentials in use stay."""
        from awide_cluster.store.credentials import CredentialError
        try:
            what = self.store.reload_credentials()
        except CredentialError as e:
            log.error("credentials reload refused, keeping the ones in use: %s", e)
        else:
            log.info("%s", what)
        api = self.api()
        if api is not None and api.tls is not None:
            try:
                log.info("%s", api.reload_tls())
            except CredentialError as e:
                log.error("API certificate reload refused, keeping the one in use: %s", e)

    async def _apply(self) -> None:
        source, self.pending = self.pending, None
        self._reload_credentials()          # the files, even when the config itself is refused
        try:
            if source is None:
                return
            new = source if isinstance(source, DaemonConfig) else daemon_config.load(source)
        except ConfigError as e:
            log.error("reload refused, keeping the running config: %s", e)
            return
        old = self.shared.config
        fixed = daemon_config.reload_problems(old, new)
        if fixed:
            log.error("reload refused, keeping the running config: %s cannot change without "
                      "a restart", ", ".join(fixed))
            return
        self.shared.config = new
        self.leader_loop.policy = policy_for(new)
        poll, call = new.timing.poll_interval, new.etcd.call_timeout
        self.health.loop_stale_after = 3 * poll + 4 * call        # as DaemonHealth.for_timing
        self.health.report_stale_after = 3 * poll + 2 * call
        # the open watches wait for their next message under the new bounds
        if self.leader_watch.watch is not None:
            self.leader_watch.watch.stall_after = new.timing.leader_watch_stall
        if self.reports_watch.watch is not None:
            self.reports_watch.watch.stall_after = new.timing.reports_watch_stall
        self.probes.reconfigure(old, new)
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
                await self.store.revoke(old, timeout=self.shared.config.etcd.call_timeout)
            except StoreError as e:
                log.warning("old lease %x not revoked (%s): it expires after its TTL", old, e)
