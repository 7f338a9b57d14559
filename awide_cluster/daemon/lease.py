"""The host's lease and the leader key: election on etcd, Patroni-style.

``HostLease``: one lease per daemon; the host report and (when leading) the leader key are
bound to it. Renewed every poll; a frozen or dead daemon's lease expires after its TTL and its
keys vanish. When etcd says the lease is gone, a new one is granted.

``Leadership``: the ``leader`` key is created only if absent (compare create_revision == 0),
bound to the lease, valued ``{"host", "since", "api", "run"}``. Its create_revision is the
fencing token: every registry write compares it. A leader holds only while it has confirmed
its lease within (TTL - margin) of now; past that it steps down without waiting for etcd.

Every daemon also watches the ``leader`` key (``Daemon``): ``key_seen`` says what a watch
batch shows (only the kind of the last event: its value is untrusted and never used) and
``on_leader_key`` what to do about it. A vacated key (deleted on a clean stop, or by etcd when
its lease expired) makes a follower run its campaign at once, the same read and fenced create
as its poll; the poll stays the bounded safety net.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Literal

from awide_cluster.contract import keys
from awide_cluster.contract.records import LeaderRecord
from awide_cluster.daemon.clock import Clock
from awide_cluster.store.errors import LeaseExpired, StoreError
from awide_cluster.store.port import Store
from awide_cluster.store.types import Compare, Delete, Get, KeyValue, Put, TxnResult, WatchBatch

log = logging.getLogger("awide_cluster.daemon")


class HostLease:
    """This daemon's lease: granted, renewed every poll, replaced when etcd lost it."""

    def __init__(self, store: Store, clock: Clock, *, ttl: int, call_timeout: float) -> None:
        self.store, self.clock = store, clock
        self.ttl = ttl                      # asked for
        self.granted_ttl = ttl              # what etcd granted / last keepalive answered
        self.call_timeout = call_timeout
        self.id: int | None = None
        self.confirmed_at: float | None = None   # monotonic time the confirming call was SENT
        self.generation = 0                 # how many leases this daemon has been granted

    @property
    def margin(self) -> float:
        """A write started later than (TTL - margin) after the confirming call might land
        after the lease expired: one call bound."""
        return self.call_timeout

    def valid(self, now: float | None = None) -> bool:
        if self.id is None or self.confirmed_at is None:
            return False
        now = self.clock.monotonic() if now is None else now
        return now < self.confirmed_at + min(self.ttl, self.granted_ttl) - self.margin

    def remaining(self) -> float:
        if self.confirmed_at is None:
            return 0.0
        return self.confirmed_at + min(self.ttl, self.granted_ttl) - self.clock.monotonic()

    async def renew(self) -> bool:
        """Keep the lease alive, or get a new one. True when a *new* lease was granted (keys
        bound to the old one are gone: the caller lost its report and its leadership).
        Raises StoreError when etcd could not be asked (the lease is then not confirmed)."""
        sent = self.clock.monotonic()
        if self.id is not None:
            try:
                self.granted_ttl = await self.store.keepalive(self.id, timeout=self.call_timeout)
                self.confirmed_at = sent
                return False
            except LeaseExpired:
                log.warning("lease %x expired: granting a new one (report and leadership "
                            "bound to it are gone)", self.id)
                self.id, self.confirmed_at = None, None
                sent = self.clock.monotonic()
        lease = await self.store.grant(self.ttl, timeout=self.call_timeout)
        self.id, self.granted_ttl, self.confirmed_at = lease.id, lease.ttl, sent
        self.generation += 1
        log.info("lease %x granted (TTL %d s)", lease.id, lease.ttl)
        return True

    async def replace(self, ttl: int) -> int | None:
        """Grant a lease with another TTL (config reload); the old id, to be revoked by the
        caller once its keys moved. Raises StoreError."""
        sent = self.clock.monotonic()
        lease = await self.store.grant(ttl, timeout=self.call_timeout)
        old = self.id
        self.id, self.ttl, self.granted_ttl, self.confirmed_at = lease.id, ttl, lease.ttl, sent
        self.generation += 1
        log.info("lease %x granted (TTL %d s) to replace %s", lease.id, lease.ttl,
                 f"{old:x}" if old else "none")
        return old

    async def revoke(self) -> None:
        """Revoke (clean stop: the report and the leader key vanish at once). Bounded."""
        if self.id is None:
            return
        lease, self.id, self.confirmed_at = self.id, None, None
        try:
            await self.store.revoke(lease, timeout=self.call_timeout)
            log.info("lease %x revoked", lease)
        except StoreError as e:
            log.warning("lease %x not revoked (%s): it expires after its TTL", lease, e)


class Leadership:
    """This daemon's claim on the ``leader`` key."""

    def __init__(self, store: Store, lease: HostLease, clock: Clock, *, host: str, run: str,
                 call_timeout: float) -> None:
        self.store, self.lease, self.clock = store, lease, clock
        self.host, self.run, self.call_timeout = host, run, call_timeout
        self.revision: int | None = None     # create_revision of our leader key: fencing token
        self.record: LeaderRecord | None = None
        self.holder: LeaderRecord | None = None   # who holds the key, as last seen
        self.api = ""
        self.tampered = ""          # our key (same create_revision) with another value/lease
        self._orphan: tuple[int, float] | None = None  # (mod_revision, first seen) lease-less
        # the leader key was taken from this daemon while its lease lived (deleted by someone
        # else: this daemon never deletes its key, its lease ends it): (when, the key revision
        # of our term); ``taken_by`` the new holder as its key says, once seen
        self.taken: tuple[str, int] | None = None
        self.taken_by = ""
        self.holder_revision = 0            # the create revision of the key taken_by names
        self.takings = 0

    @property
    def has_key(self) -> bool:
        """This daemon holds the leader key (its fencing token), its lease maybe unconfirmed."""
        return self.revision is not None

    @property
    def is_leader(self) -> bool:
        """Holds the leader key and confirmed its lease recently enough to write."""
        return self.revision is not None and self.lease.valid()

    def step_down(self, reason: str, *, level: int = logging.WARNING) -> None:
        if self.revision is not None:
            log.log(level, "%s steps down as leader: %s", self.host, reason)
        self.revision, self.record = None, None

    async def campaign(self) -> bool:
        """Create ``leader`` if absent, on our lease. True when this daemon now leads.
        Raises StoreError (nothing is retried: a create that timed out is recognised on the
        next campaign by its lease and run)."""
        if self.revision is not None:
            return True
        if not self.lease.valid() or self.lease.id is None:
            return False
        rec = LeaderRecord(host=self.host, since=self.clock.wall(), api=self.api, run=self.run)
        res = await self.store.txn(
            [Compare(keys.LEADER, "create", "equal", 0)],
            [Put(keys.LEADER, rec.encode(), self.lease.id)],
            [Get(keys.LEADER)], timeout=self.call_timeout)
        if res.succeeded:
            self.revision, self.record, self.holder = res.revision, rec, rec
            log.info("%s is leader (leader key revision %d, lease %x)", self.host,
                     res.revision, self.lease.id)
            return True
        kv = first_kv(res)
        self.holder = LeaderRecord.decode(kv.value) if kv is not None else None
        if kv is not None and kv.lease == self.lease.id and self.holder is not None \
                and self.holder.run == self.run:
            # our own earlier create, whose answer was lost: adopt it
            self.revision, self.record = kv.create_revision, self.holder
            log.info("%s is leader (adopted its own leader key, revision %d)", self.host,
                     kv.create_revision)
            return True
        return False

    async def campaign_vacant(self) -> tuple[bool, KeyValue | None, KeyValue | None]:
        """``campaign`` for a key seen vacated: one transaction creates ``leader`` on our
        lease if both it and ``intents/switchover`` are absent, else reads both (its failure
        branch). (won, the leader key, the switchover key); the keys are None when won.
        Raises StoreError."""
        if self.revision is not None:
            return True, None, None
        if not self.lease.valid() or self.lease.id is None:
            return False, None, None
        rec = LeaderRecord(host=self.host, since=self.clock.wall(), api=self.api, run=self.run)
        res = await self.store.txn(
            [Compare(keys.LEADER, "create", "equal", 0),
             Compare(keys.SWITCHOVER, "create", "equal", 0)],
            [Put(keys.LEADER, rec.encode(), self.lease.id)],
            [Get(keys.LEADER), Get(keys.SWITCHOVER)], timeout=self.call_timeout)
        if res.succeeded:
            self.revision, self.record, self.holder = res.revision, rec, rec
            log.info("%s is leader (leader key revision %d, lease %x)", self.host,
                     res.revision, self.lease.id)
            return True, None, None
        got = [r.kvs[0] if r is not None and r.kvs else None for r in res.responses]
        got += [None] * (2 - len(got))
        return False, got[0], got[1]

    def observe_key(self, kv: KeyValue | None) -> None:
        """The leader key as read by the leader's cycle: step down if it is not ours."""
        self.holder = LeaderRecord.decode(kv.value) if kv is not None else None
        if self.revision is None:
            self.seen_holder(kv)
            return
        if (kv is None or kv.create_revision != self.revision) and self.lease.valid():
            self._taken(kv)
        if kv is None:
            self.step_down("the leader key is gone (lease expired or revoked)")
        elif kv.create_revision != self.revision:
            who = self.holder.host if self.holder else "an unknown holder"
            self.step_down(f"the leader key now belongs to {who}")
        elif kv.lease != self.lease.id or self.holder != self.record:
            # still our key (the fencing token is unchanged) but someone overwrote it: a value
            # that is not our record, or a key taken off our lease (it would never expire)
            self.tampered = ("value is not this leader's record" if self.holder != self.record
                             else f"bound to lease {kv.lease:x}, not ours")
        else:
            self.tampered = ""

    def _taken(self, kv: KeyValue | None) -> None:
        """Our key is gone or another's while our lease lives (confirmed within TTL -
        margin, so etcd has not expired it, and we revoke it only when stopping): someone
        deleted it. Noted, with the new holder once its key is seen."""
        assert self.revision is not None
        self.takings += 1
        self.taken, self.taken_by = (self.clock.wall(), self.revision), ""
        self.holder_revision = 0
        log.warning("%s: the leader key (revision %d) was deleted by another etcd identity "
                    "while this daemon's lease %x lives: leadership taken", self.host,
                    self.revision, self.lease.id or 0)
        self.seen_holder(kv)

    def seen_holder(self, kv: KeyValue | None) -> None:
        """The leader key as read after ours was taken: its value names who holds it now
        (what the taker wrote: etcd records no writer). A key created since (another
        holder: a daemon campaigned between a taker's delete and its create) replaces it."""
        if self.taken is None or kv is None:
            return
        if kv.create_revision in (self.taken[1], self.holder_revision):
            return
        self.holder_revision = kv.create_revision
        rec = LeaderRecord.decode(kv.value)
        who = f"{rec.host} (the key's value)" if rec is not None else "an unreadable key"
        self.taken_by = f"{who}, lease {kv.lease:x}, key revision {kv.create_revision}"
        log.warning("%s: the leader key taken from it is now held by %s", self.host,
                    self.taken_by)

    @property
    def taken_note(self) -> str:
        """One line for the host report ("" when never taken)."""
        if self.taken is None:
            return ""
        at, rev = self.taken
        by = self.taken_by or "not seen yet"
        times = f" ({self.takings} times)" if self.takings > 1 else ""
        return (f"leadership taken{times} at {at}: leader key revision {rev} deleted while "
                f"the lease of {self.host} lived; now held by {by}")

    def history_reset(self) -> None:
        """etcd's history changed (restored or rebuilt): step down and forget the revisions
        this term rests on; the next campaign adopts the key if the new history still binds it
        to our lease (restored from a snapshot), or takes it when it is vacant."""
        self.step_down("etcd's history changed (a restored or rebuilt etcd): campaigning again")
        self._orphan = None
        self.tampered = ""

    async def repair_key(self) -> bool:
        """Rewrite our record on our lease when the key was tampered with (same fencing
        token). True when rewritten. Raises StoreError."""
        if not self.tampered or self.revision is None or self.lease.id is None:
            return False
        why, self.tampered = self.tampered, ""
        await self.move_to_lease(self.lease.id)
        if self.revision is not None:
            log.warning("leader key rewritten by %s: its %s", self.host, why)
            return True
        return False

    async def clear_orphan(self, kv: KeyValue | None, ttl: float) -> bool:
        """A follower's check of the leader key: a key on no lease is held by no daemon (every
        leader key is bound to its leader's lease) and would never expire. Once it has stayed
        unchanged and lease-less for a lease TTL (its leader, if any, had that long to bind it
        again), delete it so that a daemon can be elected. True when deleted."""
        if kv is None or kv.lease != 0:
            self._orphan = None
            return False
        now = self.clock.monotonic()
        if self._orphan is None or self._orphan[0] != kv.mod_revision:
            self._orphan = (kv.mod_revision, now)
            return False
        if now - self._orphan[1] < ttl:
            return False
        held = now - self._orphan[1]
        self._orphan = None
        res = await self.store.txn([Compare(keys.LEADER, "mod", "equal", kv.mod_revision)],
                                   [Delete(keys.LEADER)], [], timeout=self.call_timeout)
        if res.succeeded:
            log.warning("leader key deleted by %s: bound to no lease for %.1f s, so held by no "
                        "daemon (written by hand?)", self.host, held)
        return res.succeeded

    async def move_to_lease(self, lease_id: int) -> None:
        """Rebind our leader key to another lease, keeping its create_revision (fencing token
        unchanged). Raises StoreError; steps down when the key is no longer ours."""
        if self.revision is None or self.record is None:
            return
        res = await self.store.txn(
            [Compare(keys.LEADER, "create", "equal", self.revision)],
            [Put(keys.LEADER, self.record.encode(), lease_id)],
            [Get(keys.LEADER)], timeout=self.call_timeout)
        if not res.succeeded:
            self.observe_key(first_kv(res))
            self.step_down("the leader key changed hands during a lease change")


def first_kv(res: TxnResult) -> KeyValue | None:
    """The first key-value a transaction's Get responses hold (None: none)."""
    for r in res.responses:
        if r is not None and r.kvs:
            return r.kvs[0]
    return None


# ---------------------------------------------------------------------- the leader key's watch

KeySeen = Literal["put", "delete", "progress", "lost"]
"""What a watch of the ``leader`` key showed: the key written, the key deleted, nothing
(a progress notification), or events that may have been missed (the watch was (re)opened,
compacted, or a message refused)."""


class KeyAction(enum.Enum):
    CAMPAIGN = "campaign"   # a follower: read the key, take it if vacant (the poll's campaign)
    VERIFY = "verify"       # the holder: read the key, step down if it is not ours any more
    IGNORE = "ignore"


@dataclass(frozen=True, slots=True)
class KeyStep:
    action: KeyAction
    reason: str


def key_seen(batch: WatchBatch) -> KeySeen:
    """The kind of the batch's last event (the key's state at the batch's revision); the
    value in it is untrusted and not looked at."""
    if not batch.events:
        return "progress"
    return batch.events[-1].kind


def on_leader_key(seen: KeySeen, *, has_key: bool, lease_valid: bool) -> KeyStep:
    """What a daemon does about what its watch of ``leader`` showed. Only a read and the
    same checks as a poll's ever act on it: a follower campaigns (a fenced create that only
    succeeds when the key is absent), the holder re-reads its key."""
    if seen == "progress":
        return KeyStep(KeyAction.IGNORE, "progress notification")
    if has_key:
        what = {"put": "written", "delete": "deleted", "lost": "events may have been missed"}
        return KeyStep(KeyAction.VERIFY,
                       f"leader key {what[seen]} while this daemon holds it: re-read it")
    if seen == "put":
        return KeyStep(KeyAction.IGNORE, "leader key written: it is held")
    if not lease_valid:
        return KeyStep(KeyAction.IGNORE, "no confirmed lease to campaign on: the next poll "
                                         "renews it")
    if seen == "delete":
        return KeyStep(KeyAction.CAMPAIGN, "leader key vacated (revoked, or its lease "
                                           "expired): campaign at once")
    return KeyStep(KeyAction.CAMPAIGN, "leader key events may have been missed: read it and "
                                       "campaign if vacant")
