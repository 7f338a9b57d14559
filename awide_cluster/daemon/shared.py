"""What the daemon's parts share while it runs, and nothing else.

``DaemonShared`` holds the config in force (a reload swaps it), the registry this host knows
(the leader's last read or write, or a follower's read), the stop request, the term (set
while this daemon leads: the ``members/`` watch runs then), the campaign lock (one campaign
at a time: the turn's or the leader-key watch's) and the last etcd error (logged once per
distinct text, shown in ``/v1/status``). The parts that use it are built by ``service.Daemon``.
"""

from __future__ import annotations

import asyncio
import logging

from awide_cluster.config.daemon import DaemonConfig
from awide_cluster.contract.registry import Registry
from awide_cluster.daemon.clock import Clock
from awide_cluster.daemon.reconcile import Damping, Policy

log = logging.getLogger("awide_cluster.daemon")


def policy_for(cfg: DaemonConfig) -> Policy:
    """The leader's decision policy a config gives."""
    return Policy(cluster=cfg.cluster, leader=cfg.host, sick_polls=cfg.timing.sick_polls,
                  healthy_polls=cfg.timing.healthy_polls, hosts=frozenset(cfg.hosts),
                  poll_interval=cfg.timing.poll_interval,
                  damping=Damping(outs=cfg.damping.outs, window=cfg.damping.window,
                                  first_hold=cfg.damping.first_hold,
                                  max_hold=cfg.damping.max_hold),
                  allowed=cfg.allowed())


class DaemonShared:
    def __init__(self, config: DaemonConfig, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.registry: Registry | None = None
        self.stop = asyncio.Event()
        self.term = asyncio.Event()         # set while this daemon leads (the reports watch)
        self.electing = asyncio.Lock()      # one campaign at a time: the turn's or the watch's
        self.last_error = ""
        # etcd members older than the releases that fixed known authentication bypasses
        # (``contract.etcd_version``), as last read (``etcd_members``); "" when none
        self.etcd_note = ""

    def note_error(self, text: str) -> None:
        if text != self.last_error:
            log.warning("%s", text)
        self.last_error = text

    async def sleep(self, seconds: float) -> None:
        """Until ``seconds`` passed on the daemon's clock, or a stop was asked."""
        if seconds <= 0 or self.stop.is_set():
            return
        stop = asyncio.ensure_future(self.stop.wait())
        nap = asyncio.ensure_future(self.clock.sleep(seconds))
        try:
            await asyncio.wait({stop, nap}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for f in (stop, nap):
                f.cancel()
            await asyncio.gather(stop, nap, return_exceptions=True)

    async def sleep_plain(self, seconds: float) -> None:
        """Until ``seconds`` passed (real time, not the daemon's clock) or a stop was asked."""
        try:
            await asyncio.wait_for(self.stop.wait(), seconds)
        except TimeoutError:
            pass

    async def until_leading(self) -> None:
        """Until this daemon leads (the term is set) or a stop was asked."""
        if self.term.is_set() or self.stop.is_set():
            return
        stop = asyncio.ensure_future(self.stop.wait())
        term = asyncio.ensure_future(self.term.wait())
        try:
            await asyncio.wait({stop, term}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for f in (stop, term):
                f.cancel()
            await asyncio.gather(stop, term, return_exceptions=True)
