"""The gateway's registry poll (every ``poll_interval`` at a random phase, backing off while
it fails, left out while the registry watch proves the view fresh) and what the gateway does
with each step of its follower, a poll's or a watch event's (``follower.FollowStep``):
apply a registry, say it stale or fresh again, act once on a new etcd history. A base of
``ClusterGateway`` (``gateway.py``), whose ``__init__`` sets the attributes named here."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from awide_cluster.contract.registry import Registry
from awide_cluster.contract.untrusted import clean_text
from awide_cluster.store.port import Store
from awide_cluster.store.types import KeyRead, ManyGot
from awide_gateway_cluster import events as ev
from awide_gateway_cluster import view as vw
from awide_gateway_cluster.backoff import Backoff
from awide_gateway_cluster.card_workers import CardWorkers
from awide_gateway_cluster.config import GatewayConfig
from awide_gateway_cluster.etcd_side import SETTLE, EtcdSide
from awide_gateway_cluster.follower import Follower, FollowStep
from awide_gateway_cluster.registration import Registration
from awide_gateway_cluster.registry_watch import RegistryWatch
from awide_gateway_cluster.state_keeping import StateKeeping

if TYPE_CHECKING:     # imported by the gateway only when it vouches (it reads host reports)
    from awide_gateway_cluster.vouch_loop import VouchLoop

log = logging.getLogger("awide_gateway_cluster")


class RegistryPoll:
    id: str
    _store: Store | None
    _clock: Callable[[], float]
    _rng: random.Random
    _interval: float
    config: GatewayConfig
    _poll_backoff: Backoff
    _poll_now: asyncio.Event
    _tasks: list[asyncio.Task[None]]
    _epoch: int
    _history_resets: int
    _history_note: str
    _follower: Follower | None
    _registration: Registration | None
    _registry_watch: RegistryWatch
    _side: EtcdSide
    _state: StateKeeping
    _vouch: VouchLoop | None
    _cards: CardWorkers
    _view: vw.SlotView

    def _loop_failed(self, what: str, e: BaseException) -> None:
        raise NotImplementedError

    def _publish(self, e: ev.ChangeEvent) -> None:
        raise NotImplementedError

    def _rebuild(self) -> None:
        raise NotImplementedError

    def _save_state(self) -> None:
        raise NotImplementedError

    async def _poll_loop(self) -> None:
        wait = self._rng.uniform(0, self._interval)     # random phase
        assert self._follower is not None
        if self.config.watch and self._follower.state.last_ok is not None:
            # the start's read answered and the watch follows from its revision: the first
            # poll, the watch's backstop, comes an interval later, when the watch's first
            # progress notification has usually proved the view fresh and it is left out (in
            # a start storm, one read a start less; docs/decisions.md)
            wait += self._interval
        while True:
            asked = False
            with contextlib.suppress(TimeoutError):     # or earlier, when the watch asks
                async with asyncio.timeout(wait):
                    await self._poll_now.wait()
                    asked = True
            self._poll_now.clear()
            wait = self._interval
            if not asked and self._follower.skips(self._registry_watch.window):
                self._follower.skip()       # the watch proved the view fresh meanwhile
                continue
            ok = False
            try:
                ok = (await self._poll_once())[0].outcome != "failed"
            except Exception as e:      # noqa: BLE001 - no content may end the poll loop
                self._loop_failed("registry poll", e)
            wait = self._poll_backoff.next(ok)
            if not ok:
                log.debug("registry poll failed %d times in a row: next in %.2f s",
                          self._poll_backoff.failures, wait)

    async def _poll_once(self, also: KeyRead | None = None
                         ) -> tuple[FollowStep, ManyGot | None]:
        """One poll, acted upon (its outcome is "failed" when etcd did not answer it). With
        ``also``, the start's poll, ``also`` read in the same request: what was answered for
        it, None when the read failed (``Follower.start_read``)."""
        assert self._follower is not None
        self._history_check()
        other: ManyGot | None = None
        if also is None:
            taken = await self._follower.poll()
        else:
            taken, other = await self._follower.start_read(also)
        self._history_check()
        self._take(taken)
        return taken, other

    def _history_check(self) -> bool:
        """Act once on a new etcd history the store adopted (a restored or rebuilt etcd): the
        follower forgets its revisions (keeps the registry), the gateway record is written
        again and the key layout checked again (both may be gone), the next poll is now."""
        store = self._store
        if store is None or store.timeline_epoch == self._epoch:
            return False
        assert self._follower is not None and self._registration is not None
        self._epoch = store.timeline_epoch
        self._follower.sync_history()
        self._side.history_reset()
        self._history_resets += 1
        self._history_note = clean_text(store.timeline_note, 300)
        log.warning("gateway %s: etcd history changed: %s; keeping registry generation %d "
                    "until the leader republishes", self.id, self._history_note,
                    self._view.generation)
        self._poll_now.set()
        return True

    def _take(self, decision: FollowStep) -> None:
        """Act on one step of the follower (a poll's or a watch event's), right after it."""
        assert self._follower is not None
        after = self._follower.state
        if decision.outcome == "applied":
            self._apply(decision.replaced, decision)
        elif decision.outcome in ("failed", "rejected"):
            if decision.outcome == "rejected" or not decision.problem_before:
                log.warning("registry stale: %s", decision.detail)
                self._publish(ev.ChangeEvent("stale", detail=decision.detail,
                                             generation=self._view.generation))
        if decision.problem_before and not after.problem and decision.outcome != "failed":
            log.info("registry fresh again at generation %d", self._view.generation)
            self._publish(ev.ChangeEvent("fresh", generation=self._view.generation,
                                         detail="registry read and applied"))

    def _apply(self, old: Registry | None, decision: FollowStep) -> None:
        reg = decision.registry
        assert reg is not None
        served = self._state.end_serving(reg, judge=old is None)
        if served is not None:
            old = served
        if self._vouch is not None:
            old, reg = self._vouch.applied(reg, old)
        self._tasks.extend(self._cards.applied(old, reg, SETTLE * self._interval))
        self._side.applied_at = self._clock()
        if decision.detail:
            log.warning("%s", decision.detail)
        log.info("registry generation %d applied (%d cards)", reg.generation, len(reg.cards))
        self._rebuild()
        self._save_state()
