"""This gateway's own records in etcd: ``gateways/<id>`` on its lease, ``layouts/<namespace>``.

Both are best effort for serving: a failure here is logged and counted, and never takes a card
out or stops the hot path. The layout check is the exception at start: a layout recorded by
another gateway that differs from this one's refuses the start (``LayoutMismatch``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Literal, Protocol

from awide_cluster.contract import keys
from awide_cluster.contract.records import (
    GatewayRecord,
    LayoutRecord,
    LayoutRecordError,
    decode_layout,
)
from awide_cluster.store.errors import Conflict, LeaseExists, LeaseExpired, StoreError
from awide_cluster.store.port import LeaseKeeper, StoreReader, StoreWriter
from awide_cluster.store.types import Compare, KeyValue, Put
from awide_gateway_cluster.backoff import STRETCH_MAX, Stretch, ran_late
from awide_gateway_cluster.layout import (
    LayoutMismatch,
    LayoutUnreadable,
    adopt,
    decide,
    namespace_id,
)

log = logging.getLogger("awide_gateway_cluster.registration")


class LayoutStore(StoreReader, StoreWriter, Protocol):
    """What ``check_layout`` uses of the store."""


class RegistrationStore(LeaseKeeper, StoreWriter, Protocol):
    """What ``Registration`` uses of the store: a lease, and a key written on it."""


LayoutCheck = Literal["ok", "absent", "unrecorded", "wait", "cold", "grown"]


class NotRead:
    """The layout record not read yet (``check_layout`` reads it)."""


NOT_READ = NotRead()


async def check_layout(store: LayoutStore, mine: LayoutRecord, *, timeout: float,
                       create: bool = True,
                       adopted: Callable[[LayoutRecord], None] | None = None,
                       read: KeyValue | None | NotRead = NOT_READ,
                       ) -> LayoutMismatch | LayoutCheck:
    """Read the layout recorded for ``mine``'s namespace and judge it (``layout.decide``);
    record ``mine`` only when none is recorded (and ``create``; else "absent") and ``mine``
    carries its card set (else "wait"). "ok": the layouts match, or ``mine`` is now the one
    recorded, or (only new cards in ``mine``) replaced the record. "cold": a record of an older
    storage format was replaced by ``mine``. A record is replaced only if unchanged since
    read. A start of a gateway whose layout is already recorded with its cards (every start
    but the first, while no card is admitted) writes nothing, and reads nothing of its own
    when ``read`` is given (the start reads the record with its registry read).

    ``read``: the record as already read (a start reads it with its registry read, in one
    request), None when absent; ``NOT_READ``: read here.

    Raises StoreError when etcd does not answer (the caller decides what that means).
    A recorded layout that does not decode counts as a mismatch (never overwritten).
    A recorded placement algorithm other than ``mine``'s that this gateway runs is taken
    (``layout.adopt``; ``adopted`` is called with ``mine`` as changed, before the judgement).
    """
    key = keys.layout(mine.namespace)
    # read here, serializable (no raft round): the store refuses an answer below the highest
    # revision it has seen (``RevisionWentBack``), so it is no older than the registry read
    # before it and than this store's own writes; a record created since is caught by the
    # create's compare (a start's ``read`` came in its registry read's linearizable request)
    kv = (await store.get(key, timeout=timeout, serializable=True)
          if isinstance(read, NotRead) else read)
    if kv is None:
        if not create:
            return "absent"
        if mine.cards is None:
            return "wait"
        try:
            await store.create(key, mine.encode(), timeout=timeout)
            log.info("recorded key layout of namespace %s: %s, storage format %d, %d cards",
                     mine.namespace, mine.describe(), mine.format, len(mine.cards))
            return "ok"
        except Conflict:        # another gateway recorded one meanwhile: compare with it
            kv = await store.get(key, timeout=timeout)
        if kv is None:          # deleted between the calls: check again at the next tick
            raise StoreError(f"{key} vanished while being read")
    try:
        recorded = decode_layout(kv.value, key=key)
    except LayoutRecordError as e:
        return LayoutUnreadable(mine.namespace, str(e), mine)     # never overwritten
    taken = adopt(recorded, mine)
    if taken != mine:
        log.warning("namespace %s is recorded with placement algorithm %d (this gateway's "
                    "default is %d): it is used, under namespace id %s", mine.namespace,
                    taken.algorithm, mine.algorithm,
                    namespace_id(mine.namespace, taken.format, taken.algorithm))
        mine = taken
        if adopted is not None:
            adopted(mine)
    step = decide(recorded, mine)
    if step in ("cold", "grown"):
        if mine.cards is None:
            return "wait"
        put = await store.txn([Compare(key, "mod", "equal", kv.mod_revision)],
                              [Put(key, mine.encode())], timeout=timeout)
        if not put.succeeded:   # changed meanwhile: judge it again at the next tick
            raise StoreError(f"{key} changed while being replaced")
    if step == "grown":
        log.info("card set of namespace %s recorded again with its new cards: %s (registry "
                 "generation %d)", mine.namespace,
                 ", ".join(sorted(set(mine.cards or ()) - set(recorded.cards or ()))),
                 mine.cards_generation)
        return "ok"
    if step == "cold":
        log.warning("namespace %s starts cold: storage format %d recorded (by gateway %s), "
                    "this gateway writes format %d under namespace id %s; the blocks of "
                    "format %d are never read", mine.namespace, recorded.format,
                    recorded.created_by or "?", mine.format,
                    namespace_id(mine.namespace, mine.format, mine.algorithm), recorded.format)
    return step


def lease_id_for_start(rng: random.Random) -> int:
    """The lease ID a gateway asks etcd for, chosen once per start: positive, 62 random bits
    (two gateways choosing the same one is as likely as never)."""
    return rng.randrange(1, 1 << 62)


class Registration:
    """Keeps ``gateways/<id>`` written on this gateway's own lease.

    ``tick(record, now)`` grants a lease when there is none (or it expired), rewrites the key
    when the record changed or the lease is new, and sends a keepalive every ttl/3; the first
    after a grant comes at a random share of that (a tenth to all of it), so that gateways
    started together (a rollout) do not keep their leases alive in step for ever after.

    One lease, never two: every grant asks for the same lease ID (``lease_id``, chosen once
    per start). A grant whose answer was lost may have been applied; the next grant of the
    same ID then answers "lease already exists", and that lease is taken as this one's (kept
    alive as if granted when the first unanswered grant was sent: a keepalive at once only
    when that is ttl/3 ago or more). A lease that expired is granted again under the same ID.

    A tick never gives up for good: the etcd side's loop ticks again after its jittered
    back-off until the record is written. Each call of a tick is bounded by ``bound()``: the
    call timeout, doubled after each tick whose bound passed while the gateway's own event
    loop ran late (``backoff.Stretch``), at most
    ``STRETCH_MAX`` call timeouts and a quarter of the TTL: a gateway whose own event loop runs
    late (a start storm on a busy host) reads etcd's answers seconds after they came, and
    with a fixed bound no try of it would ever land.
    """

    def __init__(self, store: RegistrationStore, gateway_id: str, *, ttl: int,
                 call_timeout: float, lease_id: int | None = None,
                 rng: random.Random | None = None) -> None:
        self.store = store
        self.key = keys.gateway(gateway_id)
        self.ttl, self.call_timeout = ttl, call_timeout
        self._rng = rng or random.Random()
        self.lease_id = lease_id or lease_id_for_start(self._rng)
        self.lease: int | None = None
        self._grant_sent = False        # a grant of lease_id was sent since the last answer
        self._grant_sent_at = 0.0      # tick time of the first grant sent since the last answer
        self._written: GatewayRecord | None = None
        self._last_keepalive = 0.0
        self.failures = 0
        self.grants = 0                 # grants sent (each of lease_id)
        self.stretch = Stretch(call_timeout, max(call_timeout,
                                                 min(STRETCH_MAX * call_timeout, ttl / 4)))

    @property
    def written(self) -> GatewayRecord | None:
        """The record written on the current lease (None: none yet)."""
        return self._written

    @property
    def keepalive_due(self) -> float:
        """The tick time from which the next keepalive is sent (meaningless without a
        lease)."""
        return self._last_keepalive + self.ttl / 3

    def _put_due(self, record: GatewayRecord, hold: bool) -> bool:
        return record != self._written and not (hold and self._written is not None)

    def quiet(self, record: GatewayRecord, now: float, *, hold: bool = False) -> bool:
        """Whether a tick at ``now`` would send nothing to etcd: a lease held, no keepalive
        due, the record written (or held back). Most ticks: the caller then sets no bound."""
        return (self.lease is not None and now < self.keepalive_due
                and not self._put_due(record, hold))

    def bound(self) -> float:
        """The bound of each call of the next tick (seconds)."""
        return self.stretch.bound()

    def tick_bound(self) -> float:
        """The bound of a whole tick (its calls in a row: a grant, a keepalive, a put)."""
        return self.bound() * 3.5

    def timed_out(self) -> None:
        """A tick was cut by its caller's fence (``tick_bound``): counted as a failure whose
        bound passed."""
        self.failures += 1
        self.stretch.note(True)

    async def tick(self, record: GatewayRecord, now: float, *, hold: bool = False) -> bool:
        """One refresh; a lease found gone is granted again and the record written at once.
        ``hold``: a changed record waits for a later tick, unless none is written on the
        current lease (the key must exist). False when etcd did not answer (the caller backs
        off)."""
        bound = self.bound()
        for _ in range(2):
            try:
                await self._tick(record, now, hold, bound)
                self.stretch.note(False)
                return True
            except LeaseExpired:
                log.warning("lease of %s expired: registering again", self.key)
                self.lease, self._written = None, None
                self.failures += 1
            except StoreError as e:
                self.failures += 1
                self.stretch.note(ran_late(e))
                log.debug("registration of %s not refreshed (calls bounded by %.2f s): %s",
                          self.key, bound, e)
                return False
        return False

    async def _grant(self, now: float, bound: float) -> None:
        s = self.store
        self.grants += 1
        sent_before, self._grant_sent = self._grant_sent, True
        if not sent_before:
            self._grant_sent_at = now
        try:
            lease = await s.grant(self.ttl, lease_id=self.lease_id, timeout=bound)
        except LeaseExists:
            if not sent_before:
                # not ours: another client holds this ID; choose another for the next tick
                self.lease_id, self._grant_sent = lease_id_for_start(random.Random()), False
                raise
            log.info("lease %x of %s was granted by an earlier try: kept", self.lease_id,
                     self.key)
            self.lease, self._written, self._grant_sent = self.lease_id, None, False
            # granted at the earliest when the first unanswered grant was sent: kept alive
            # from then on (a keepalive now only when one is due by that reckoning)
            self._last_keepalive = self._grant_sent_at
            if now - self._last_keepalive >= self.ttl / 3:
                await s.keepalive(self.lease_id, timeout=bound)
                self._last_keepalive = now
            return
        self._grant_sent = False
        self.lease, self._written = lease.id, None
        # the first keepalive after ttl/3 times a random share from a tenth to the whole
        # (counted as if one had been sent up to 0.9 of ttl/3 before the grant)
        self._last_keepalive = now - self._rng.uniform(0.0, 0.9) * self.ttl / 3

    async def _tick(self, record: GatewayRecord, now: float, hold: bool, bound: float) -> None:
        s = self.store
        if self.lease is None:
            await self._grant(now, bound)
        elif now >= self.keepalive_due:
            await s.keepalive(self.lease, timeout=bound)
            self._last_keepalive = now
        if self._put_due(record, hold):
            assert self.lease is not None
            await s.put(self.key, record.encode(), lease=self.lease, timeout=bound)
            self._written = record

    def history_reset(self) -> None:
        """A new etcd history (restored or rebuilt): the record is written again at the next
        tick (the restored one is older, a rebuilt etcd has none); a lease the new history
        does not know raises LeaseExpired at its keepalive and is granted again."""
        self._written = None
        self._last_keepalive = float("-inf")

    async def close(self) -> None:
        """Revoke the lease, or the one a grant whose answer was lost may have left."""
        lease = self.lease if self.lease is not None else (
            self.lease_id if self._grant_sent else None)
        if lease is None:
            return
        try:
            await self.store.revoke(lease, timeout=self.call_timeout)
        except StoreError as e:
            log.info("lease of %s not revoked (it expires by itself): %s", self.key, e)
        self.lease, self._grant_sent = None, False
