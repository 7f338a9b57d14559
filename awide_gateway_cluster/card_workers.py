"""The gateway's card workers: one per registry card, each probing its card's path.

A worker connects/probes its card once per poll, bounded, and folds the probe into the card's
``CardPath`` (``cardpath.advance``); a round loop wakes them all at once each poll interval,
so their blocking reads go to the probe worker's one thread together
(``awide_cluster.cards.worker``). I/O errors the caller reports count as a bad observation at
the next probe. A registry change starts workers for new cards, stops those of forgotten ones
and wakes a card put back in service (at once when its path is not known good, else once the
change settled). Each round also lets go of stray controllers (``Connector.sweep``): to a
subsystem NQN of the cards of any registry used in this run (or kept in the state file from
the previous one), at no target of a card in use.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from awide_cluster.contract.registry import CardEntry, Registry
from awide_gateway_cluster import events as ev
from awide_gateway_cluster import view as vw
from awide_gateway_cluster.cardpath import Probe, advance
from awide_gateway_cluster.config import GatewayConfig
from awide_gateway_cluster.connector import Connector

log = logging.getLogger("awide_gateway_cluster")
SUBNQNS_MAX = 4096      # the cluster's subsystem NQNs remembered for the sweep at most


class CardWorkers:
    def __init__(self, config: GatewayConfig, *, rng: random.Random,
                 registry: Callable[[], Registry | None], view: Callable[[], vw.SlotView],
                 changed: Callable[[], None],
                 publish: Callable[[ev.ChangeEvent], None]) -> None:
        self.config, self._rng = config, rng
        self._registry, self._view, self._changed, self._publish = registry, view, changed, \
            publish
        self._interval = config.timing.poll_interval
        self.connector: Connector | None = None     # set when the gateway starts
        self.local: dict[str, vw.CardPath] = {}     # card id -> its path as probed here
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self.first_probe: dict[str, asyncio.Event] = {}
        self._io_errors: dict[str, int] = {}
        self._io_lock = threading.Lock()          # guards a dict update only, never I/O
        self.hostile = 0                          # registry targets refused as hostile
        self.refused = 0                          # cards refused (serial, identity, label)
        self.subnqns: set[str] = set()            # the cards' subsystem NQNs seen in this run
        self.swept = 0                            # stray controllers disconnected
        self._probing: dict[str, float] = {}      # card id -> loop time its probe started
        self._overdue: set[str] = set()           # cards whose probe was cut at its bound
        self._checked_at: float | None = None     # when the round loop looks at the bounds
        self._recheck: asyncio.Event | None = None    # a probe's bound ends before that
        self._build_due = False                   # a view build is scheduled

    @property
    def bound(self) -> float:
        """A card's probe in flight this long is cancelled by the round loop (seconds)."""
        sysfs = self.connector.sysfs_timeout if self.connector is not None else 1.0
        return 3 * self.config.nvme.command_timeout + 4 * sysfs

    def report_io_error(self, card_id: str) -> None:
        """The caller saw an I/O error on ``card_id`` (any thread): counted at its next probe."""
        with self._io_lock:
            self._io_errors[card_id] = self._io_errors.get(card_id, 0) + 1

    def take_tasks(self) -> list[asyncio.Task[None]]:
        """The workers' tasks, handed over to be cancelled (the gateway stops)."""
        tasks, self._workers = list(self._workers.values()), {}
        return tasks

    def applied(self, old: Registry | None, reg: Registry, settle: float
                ) -> list[asyncio.Task[None]]:
        """A registry applied: forget the cards it dropped, a worker for each card, and wake a
        card put back in service. The tasks releasing forgotten cards' connections (the
        gateway cancels them when it stops)."""
        releases: list[asyncio.Task[None]] = []
        self.remember(reg)
        old_cards = {c.id: c for c in old.cards} if old else {}
        for cid, card in old_cards.items():
            if reg.card(cid) is None:
                release = self._forget(card, reg)
                if release is not None:
                    releases.append(asyncio.create_task(release))
        for card in reg.cards:
            self._ensure_worker(card)
            prev = old_cards.get(card.id)
            if prev is not None and prev.state != "in" and card.state == "in":
                local = self.local.get(card.id)
                if local is not None and not vw.why_out(card, local, True, ""):
                    # its path was good at the last round (probed every round while out):
                    # the view shows it in service now, probed again once the change settled
                    asyncio.get_running_loop().call_later(settle, self._wake_card, card.id)
                else:
                    self._wake[card.id].set()       # a path not known good: probed at once
        return releases

    def remember(self, reg: Registry) -> None:
        """The subsystem NQNs of ``reg``'s NVMe cards are the cluster's (for the sweep): a
        registry applied, or the state file's at start. At most ``SUBNQNS_MAX``."""
        for c in reg.cards:
            if c.target is not None and len(self.subnqns) < SUBNQNS_MAX:
                self.subnqns.add(c.target.subnqn)

    async def sweep(self) -> None:
        """Stray controllers disconnected (``Connector.sweep``), when forgotten cards are
        disconnected at all (``nvme.disconnect_forgotten``)."""
        reg = self._registry()
        if self.connector is None or reg is None or not self.config.nvme.disconnect_forgotten:
            return
        try:
            self.swept += await self.connector.sweep(reg.cards, frozenset(self.subnqns))
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the next round tries again
            log.warning("stray controller sweep failed: %s", e)

    def _wake_card(self, card_id: str) -> None:
        wake = self._wake.get(card_id)
        if wake is not None:
            wake.set()

    def _forget(self, card: CardEntry, reg: Registry) -> Coroutine[Any, Any, None] | None:
        task = self._workers.pop(card.id, None)
        if task is not None:
            task.cancel()
        self._wake.pop(card.id, None)
        self.first_probe.pop(card.id, None)
        self.local.pop(card.id, None)
        if self.config.nvme.disconnect_forgotten and card.target is not None:
            assert self.connector is not None
            shared = any(c.target and c.target.subnqn == card.target.subnqn for c in reg.cards)
            return self.connector.release(card, shared=shared)
        return None

    def _ensure_worker(self, card: CardEntry) -> None:
        if card.id in self._workers:
            return
        self._wake[card.id] = asyncio.Event()
        self.first_probe[card.id] = asyncio.Event()
        self._workers[card.id] = asyncio.create_task(self._card_loop(card.id),
                                                     name=f"awide-card-{self.config.id}-{card.id}")

    def _take_io_errors(self, card_id: str) -> int:
        with self._io_lock:
            return self._io_errors.pop(card_id, 0)

    async def _card_loop(self, card_id: str) -> None:
        assert self.connector is not None
        t = self.config.timing
        loop = asyncio.get_running_loop()
        while True:
            reg = self._registry()
            card = reg.card(card_id) if reg else None
            if card is None:
                return
            known = self.local.get(card_id)
            local = known or vw.CardPath(card_id)
            errors = self._take_io_errors(card_id)
            started = loop.time()
            self._probing[card_id] = started
            if (self._recheck is not None and self._checked_at is not None
                    and started + self.bound < self._checked_at):
                self._recheck.set()         # its bound ends before the round loop's next turn
            try:
                probe = await self.connector.probe(card, local, errors)
            except asyncio.CancelledError:
                # cut by the round loop at its bound (as asyncio.timeout does: a cancel of
                # the task from elsewhere, e.g. the gateway stopping, is not taken for it)
                task = asyncio.current_task()
                if card_id not in self._overdue or task is None or task.uncancel() > 0:
                    raise
                log.warning("card %s: probe over its bound of %.1f s", card_id, self.bound)
                probe = Probe(device=local.device, verified=local.verified,
                              note=f"probe failed: over its bound of {self.bound:g} s")
            except Exception as e:  # noqa: BLE001 - a probe failure is no observation
                log.warning("card %s: probe failed: %s", card_id, e)
                probe = Probe(device=local.device, verified=local.verified,
                              note=f"probe failed: {type(e).__name__}: {e}")
            finally:
                if self._probing.get(card_id) == started:
                    del self._probing[card_id]
                self._overdue.discard(card_id)
            if card_id not in self._workers:       # forgotten while probing
                return
            new = advance(local, probe, sick_polls=t.sick_polls, healthy_polls=t.healthy_polls)
            if probe.hostile:
                self.hostile += 1
            if new.refused and new.refused != local.refused:
                self.refused += 1
                view = self._view()
                self._publish(ev.ChangeEvent("refused", card_id, view.table.slot_of(card_id),
                                             generation=view.generation, detail=new.refused))
            if new is not local and new != local:
                self.local[card_id] = new
                # the view is built again only when what it shows of the card changed (a
                # good streak growing changes nothing it shows), once for the cards of a round
                if known is None or vw.shown(new) != vw.shown(local):
                    self._view_changed()
            first = self.first_probe.get(card_id)
            if first is not None:
                first.set()
            wake = self._wake.get(card_id)
            if wake is None:
                return
            await wake.wait()       # the round loop's next turn, or a registry change
            wake.clear()

    def _view_changed(self) -> None:
        """A card's path changed what the view shows: the view is built again once the cards
        whose probes ended in this turn of the event loop are folded (one build per round)."""
        if not self._build_due:
            self._build_due = True
            asyncio.get_running_loop().call_soon(self._build_now)

    def _build_now(self) -> None:
        self._build_due = False
        self._changed()

    def _cut_overdue(self, now: float) -> float:
        """Cancel the probes in flight past their bound; the loop time the next one ends at."""
        for cid, started in list(self._probing.items()):
            if now >= started + self.bound and cid not in self._overdue:
                task = self._workers.get(cid)
                if task is not None:
                    self._overdue.add(cid)
                    task.cancel()
        ends = [s + self.bound for c, s in self._probing.items() if c not in self._overdue]
        return min(ends, default=now + 2 * self.bound)

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``, cutting probes that pass their bound meanwhile (one timer per
        turn for every card of the gateway, not two per card)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + seconds
        if self._recheck is None:
            self._recheck = asyncio.Event()
        while True:
            now = loop.time()
            wake_at = min(until, self._cut_overdue(now))
            if now >= until:
                self._checked_at = None
                return
            self._checked_at = wake_at
            self._recheck.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(wake_at):
                    await self._recheck.wait()

    async def probe_round_loop(self) -> None:
        """Every poll interval, at a random phase, wake every card's worker at once: their
        probes start in the same loop iteration, so their blocking reads go to the probe
        worker's thread as one submission (one wake-up of the loop, not one per card), and
        the view is built once for the round. The loop also bounds every card's probe: one
        in flight past ``bound`` is cancelled (a probe that failed, no observation)."""
        await self._pause(self._rng.uniform(0, self._interval))
        while True:
            try:
                for wake in self._wake.values():
                    wake.set()
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the round loop bounds the probes
                log.error("probe round failed: %s", e)
            await self._pause(self._interval)
