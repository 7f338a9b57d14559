"""The gateway's etcd side: the key layout check (until it is done), then ``gateways/<id>``.

``EtcdSide`` runs one loop on the gateway's event loop. Its first tick waits a random delay
of up to one poll interval (the writes of a start storm spread over it), and the first
registration waits while the view is stale (at most ``FIRST_RECORD_WAIT`` poll intervals from
the start); each tick checks the
key layout of the namespace while it is not verified (``registration.check_layout``), then
refreshes the registration (``registration.Registration``). While its calls fail it backs
off with jitter (``backoff``), the last known state served meanwhile. It holds what the
gateway knows of its layout (``ok``, ``problem``, ``mismatch``); the gateway
(``gateway.ClusterGateway``) builds its view from that and acts on each change through the
callbacks (``changed``: the view, ``save``: the state file, ``publish``: the events).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from dataclasses import replace

from awide_cluster.contract import keys
from awide_cluster.contract.records import GatewayRecord, LayoutRecord
from awide_cluster.contract.registry import Registry
from awide_cluster.store.errors import StoreError
from awide_cluster.store.port import Store
from awide_cluster.store.types import KeyRead, KeyValue, ManyGot, RangeResult
from awide_gateway_cluster import events as ev
from awide_gateway_cluster import layout as lay
from awide_gateway_cluster.backoff import CAP_INTERVALS, STRETCH_MAX, Backoff, Stretch, ran_late
from awide_gateway_cluster.registration import NOT_READ, NotRead, Registration, check_layout
from awide_gateway_cluster.state_keeping import StateKeeping

log = logging.getLogger("awide_gateway_cluster")

# the quiet time after a registry change is applied, as a share of the poll interval: the
# gateway's own etcd writes caused by the change (the ``gateways/<id>`` rewrite with the new
# generation) wait until it has passed, and so does the probe of a card the change put back in
# service. Right after a change every gateway of the cluster applies it at the same moment and
# etcd fans its event out to all of them: a write there slows the others' apply, later it costs
# the same and slows nothing (docs/decisions.md, "Quiet after a change").
SETTLE = 0.25
# the first registration of a start waits while the gateway's view is stale (its first
# registry read failed or found nothing), for at most this many poll intervals after the
# start: its first record then says what it applied, instead of a stale record rewritten a
# moment later (in a start storm, one write in three was that rewrite). A gateway still
# stale after the wait registers as stale (docs/decisions.md, "What a gateway's start asks
# of etcd in a storm").
FIRST_RECORD_WAIT = 3


def record_hold(written: GatewayRecord | None, record: GatewayRecord, now: float,
                applied_at: float | None, held: int, interval: float) -> bool:
    """Whether a tick holds the changed record back for a later tick (``held``: how many
    ticks in a row before this one did). Never a record not written on the current lease.

    Right after a registry change every gateway applies it at once and etcd fans the event
    out to all of them: no record is written less than ``SETTLE`` after an apply if a tick
    can wait. A record whose only change is the registry generation it applied (every
    gateway's, at every registry change) also waits one tick: written at the second tick
    that sees it (the third when the second is within ``SETTLE`` of a later apply), so the
    changes of a poll interval go in one write. Any other change (stale, fingerprint, the
    refusals) is held only by ``SETTLE``, one tick at most. A record is written within two
    poll intervals of the apply, three when changes keep landing just before its ticks."""
    if written is None or record == written or held >= 2:
        return False
    settling = applied_at is not None and now - applied_at < SETTLE * interval
    if replace(record, generation=written.generation) == written:
        return held == 0 or settling
    return held == 0 and settling


def _recorded(read: ManyGot | None) -> KeyValue | None | NotRead:
    """The layout record as the start's read answered it (a ranged read, so that absent is
    not mistaken for unread): its KeyValue, None (absent), or ``NOT_READ`` (no answer:
    ``check_layout`` reads it)."""
    if isinstance(read, RangeResult):
        return read.kvs[0] if read.kvs else None
    return NOT_READ


class EtcdSide:
    def __init__(self, layout: LayoutRecord, *, store: Callable[[], Store],
                 state: StateKeeping, record: Callable[[], GatewayRecord],
                 registry: Callable[[], Registry | None],
                 history_check: Callable[[], bool], changed: Callable[[], None],
                 save: Callable[[], None], publish: Callable[[ev.ChangeEvent], None],
                 generation: Callable[[], int],
                 failed: Callable[[str, BaseException], None], interval: float,
                 call_timeout: float, clock: Callable[[], float], rng: random.Random) -> None:
        self.layout = layout
        self.namespace_id = lay.namespace_id(layout.namespace, layout.format, layout.algorithm)
        self._told = False                       # "no card set recorded" said
        self._store, self._state, self._record = store, state, record
        self._registry = registry                # the registry accepted (its card set)
        self._history_check, self._changed, self._save = history_check, changed, save
        self._publish, self._generation, self._failed = publish, generation, failed
        self._interval, self._call, self._clock, self._rng = interval, call_timeout, clock, rng
        self._backoff = Backoff(interval, CAP_INTERVALS * interval, rng)
        # the layout check's call bound, stretched while its tries run out of time
        self._layout_bound = Stretch(call_timeout, STRETCH_MAX * call_timeout)
        self.ok = self.mismatch = False
        self.unreadable = 0                      # layout records that did not decode
        self.problem = "key layout not verified yet (etcd not reached)"
        self.registration: Registration | None = None
        self.applied_at: float | None = None     # clock time the last registry was applied
        self._held = 0                           # ticks in a row that held the record back
        self._started_at: float | None = None    # clock time this side's loop began
        self.first_waits = 0                     # ticks the first registration waited

    def taken_from_file(self) -> None:
        """The state file's layout is served as verified (etcd did not answer at start)."""
        self.ok, self.problem = True, ""

    def history_reset(self) -> None:
        """A new etcd history: the layout is checked again, the record written again."""
        self.ok = False
        if self.registration is not None:
            self.registration.history_reset()

    def layout_read(self) -> KeyRead:
        """The read of the namespace's layout record (the start's, in its registry read)."""
        return KeyRead(keys.layout(self.layout.namespace), ranged=True)

    async def check_layout(self, *, create: bool = True, read: ManyGot | None = None) -> bool:
        """Check (and with ``create``, record if absent) the key layout, with the card set of
        the registry accepted; False when etcd did not answer. Raises LayoutMismatch.
        ``read``: what ``layout_read`` answered, read with the start's registry read (None:
        not read, or failed: it is read here)."""
        reg = self._registry()
        mine = self.layout if reg is None else lay.with_cards(self.layout, lay.card_set(reg))
        bound = self._layout_bound.bound()
        try:
            async with asyncio.timeout(bound * 3.5):
                step = await check_layout(self._store(), mine, timeout=bound,
                                          create=create, adopted=self._adopt,
                                          read=_recorded(read))
        except (StoreError, TimeoutError) as e:
            self._layout_bound.note(ran_late(e))
            log.debug("layout of %s not checked yet (calls bounded by %.2f s): %s",
                      self.layout.namespace, bound, e)
            return False
        self._layout_bound.note(False)
        if isinstance(step, lay.LayoutMismatch):
            self.ok, self.problem = False, str(step)
            self.mismatch = True
            if isinstance(step, lay.LayoutUnreadable):
                self.unreadable += 1
            log.error("%s", step)
            self._publish(ev.ChangeEvent("layout_mismatch", detail=str(step),
                                         generation=self._generation()))
            self._changed()
            raise step
        if step in ("absent", "wait"):
            self.problem = (
                "key layout not recorded yet (the namespace's first gateway records it after "
                "its start-up delay)" if step == "absent" else
                "key layout not verified yet (no registry read yet, or one older than the "
                "namespace's layout record)")
            self._changed()
            return True
        if step == "unrecorded" and not self._told:
            self._told = True
            log.info("layout record of namespace %s carries no card set (written by an "
                     "older release): the card set is not checked", self.layout.namespace)
        self.ok, self.problem = True, ""
        self._state.layout_verified(self.layout)
        self._changed()
        self._save()
        return True

    def _adopt(self, taken: LayoutRecord) -> None:
        """The namespace's recorded placement algorithm, which this gateway runs, is used
        (its key prefix changes with it: ``layout.namespace_id``)."""
        self.layout = replace(self.layout, algorithm=taken.algorithm)
        self.namespace_id = lay.namespace_id(taken.namespace, taken.format, taken.algorithm)

    async def run(self) -> None:
        # start-up jitter: the first registration (and layout record) of gateways started
        # together spreads over one poll interval
        self._started_at = self._clock()
        await asyncio.sleep(self._rng.uniform(0, self._interval))
        while True:
            ok = False
            try:
                ok = await self.once()
            except Exception as e:      # noqa: BLE001 - no content may end this loop
                self._failed("registration", e)
            wait = self._backoff.next(ok)
            if not ok:
                log.debug("registration failed %d times in a row: next in %.2f s",
                          self._backoff.failures, wait)
            await asyncio.sleep(wait)

    def _first_wait(self, record: GatewayRecord, now: float) -> bool:
        """Whether this tick leaves the start's first registration for a later one: nothing
        granted or written yet this start, the view stale, and the start younger than
        ``FIRST_RECORD_WAIT`` poll intervals."""
        reg = self.registration
        return (reg is not None and reg.grants == 0 and reg.written is None and record.stale
                and self._started_at is not None
                and now - self._started_at < FIRST_RECORD_WAIT * self._interval)

    async def once(self) -> bool:
        """One tick of the etcd side; False when etcd did not answer a call of it."""
        self._history_check()
        ok = True
        if (not self.ok or self._state.layout_from_file) and not self.mismatch:
            with contextlib.suppress(lay.LayoutMismatch):
                ok = await self.check_layout()
        assert self.registration is not None
        record = self._record()
        now = self._clock()
        if self._first_wait(record, now):
            self.first_waits += 1
            return ok
        # when a changed record is written (the keepalive is never held): record_hold
        hold = record_hold(self.registration.written, record, now, self.applied_at,
                           self._held, self._interval)
        self._held = self._held + 1 if hold else 0
        if self.registration.quiet(record, now, hold=hold):
            return ok           # nothing to send: no call, no bound to set
        try:
            async with asyncio.timeout(self.registration.tick_bound()):
                ok = await self.registration.tick(record, now, hold=hold) and ok
        except TimeoutError:
            self.registration.timed_out()
            ok = False
        return ok
