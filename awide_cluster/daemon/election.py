"""The campaign for the ``leader`` key: the turn's (step 4a) and the leader-key watch's.

Both campaign under ``DaemonShared.electing`` (one at a time). A campaign reads the key and
creates it on this host's lease when it is vacant (or ours); a won campaign starts a new term
of the ``LeaderLoop`` from the registry this host knows.
"""

from __future__ import annotations

import logging

from awide_cluster.contract import keys
from awide_cluster.contract.records import LeaderRecord, RecordError, decode_switchover
from awide_cluster.daemon.leader import LeaderLoop
from awide_cluster.daemon.lease import HostLease, Leadership
from awide_cluster.daemon.shared import DaemonShared
from awide_cluster.daemon.switchover import defers
from awide_cluster.store.errors import StoreError
from awide_cluster.store.port import Store
from awide_cluster.store.types import KeyValue

log = logging.getLogger("awide_cluster.daemon")


class Election:
    def __init__(self, shared: DaemonShared, store: Store, lease: HostLease,
                 leadership: Leadership, leader_loop: LeaderLoop) -> None:
        self.shared, self.store, self.lease = shared, store, lease
        self.leadership, self.leader_loop = leadership, leader_loop
        self._deferred: tuple[int, float] | None = None    # (mod_revision, first seen)

    async def handed_to_another(self, read: tuple[KeyValue | None] | None = None) -> bool:
        """The leader key is vacant because a switchover handed leadership to another host:
        do not campaign, for at most a lease TTL by this daemon's clock since the hand-over
        was first seen (``switchover``). ``read``: the switchover key as already read (None:
        read it now). Raises StoreError."""
        cfg = self.shared.config
        kv = (await self.store.get(keys.SWITCHOVER, timeout=cfg.etcd.call_timeout)
              if read is None else read[0])
        try:
            rec = decode_switchover(kv.value) if kv is not None else None
        except RecordError:
            rec = None
        if kv is None or not defers(rec, cfg.host):
            self._deferred = None
            return False
        now = self.shared.clock.monotonic()
        if self._deferred is None or self._deferred[0] != kv.mod_revision:
            self._deferred = (kv.mod_revision, now)
            log.info("%s does not campaign: leadership is being handed over to %s",
                     cfg.host, rec.to if rec is not None else "?")
        return now - self._deferred[1] < cfg.timing.lease_ttl

    async def elect(self) -> bool:
        """4a. Campaign for ``leader`` when nobody holds it. False: etcd failed."""
        if self.leadership.has_key or not self.lease.valid():
            return True
        try:
            async with self.shared.electing:
                await self.campaign()
        except StoreError as e:
            self.shared.note_error(f"leader election: {e}")
            return False
        return True

    async def campaign(self, *, vacated: bool = False) -> None:
        """Read the leader key; create it on our lease if it is vacant (or ours). The poll's
        and the watch's campaign; the caller holds ``electing``. ``vacated``: the key was
        seen deleted (the watch): first the create itself, compared on both the leader and the
        switchover key being absent (what the reads would have found before creating); when
        either exists, its failure branch reads both and the campaign goes on from there as
        after the reads. Raises StoreError."""
        if self.leadership.has_key or not self.lease.valid():
            return
        cfg = self.shared.config
        switchover: tuple[KeyValue | None] | None = None
        if vacated:
            won, kv, other = await self.leadership.campaign_vacant()
            if won:
                self._deferred = None
                self.leader_loop.reset(known=self.shared.registry)
                return
            switchover = (other,)
        else:
            kv = await self.store.get(keys.LEADER, timeout=cfg.etcd.call_timeout)
        self.leadership.holder = LeaderRecord.decode(kv.value) if kv else None
        self.leadership.seen_holder(kv)
        # our own key still bound to our (confirmed) lease: we stepped down because
        # the lease went unconfirmed (e.g. etcd lost quorum) but etcd kept it; nobody
        # else can take the key while we renew the lease, so campaign (it adopts the
        # key) instead of leaving the cluster without a leader
        ours = kv is not None and kv.lease == self.lease.id
        if not ours and await self.leadership.clear_orphan(kv, cfg.timing.lease_ttl):
            kv = None
        if kv is None and await self.handed_to_another(switchover):
            return
        if (kv is None or ours) and await self.leadership.campaign():
            self.leader_loop.reset(known=self.shared.registry)

