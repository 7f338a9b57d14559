"""A follower's read of the registry (step 4 when not leading), for the status view.

Read only when it changed (``min_mod_revision``), bounded; an unreadable registry (too large,
corrupt, gone back) is refused and the last good one kept (that revision is not read again).

When one of this host's cards changed in it (in, out, drained, undrained, joined, ...), the
history is read too (bounded) and its entries about this host's cards are logged here, in
the history's words (``history_ring.journal``, a card out at warning): the operator reading
this host's journal sees what the leader decided about its cards, and why.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from awide_cluster.contract import bounds, keys
from awide_cluster.contract import history_ring as histdoc
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract import versions as ver
from awide_cluster.contract.registry import Registry, RegistryError
from awide_cluster.daemon.history_entries import own_changed, own_entries
from awide_cluster.daemon.shared import DaemonShared
from awide_cluster.store.errors import StoreError, ValueTooLarge
from awide_cluster.store.port import Store

if TYPE_CHECKING:
    from awide_cluster.api.metrics import DaemonMetrics

log = logging.getLogger("awide_cluster.daemon")


class RegistryFollow:
    def __init__(self, shared: DaemonShared, store: Store, metrics: DaemonMetrics) -> None:
        self.shared, self.store, self.metrics = shared, store, metrics
        self.revision = 0       # mod_revision of the registry last read (0: read it whole)
        self.logged = ("", 0)   # (ring, seq) of the last history entry logged here

    async def read(self) -> bool:
        """Read the registry if it changed into ``shared.registry``. False: etcd failed."""
        shared = self.shared
        try:
            after = self.revision + 1 if self.revision else None
            kv = await self.store.get(keys.REGISTRY, min_mod_revision=after,
                                      timeout=shared.config.etcd.call_timeout,
                                      max_value_bytes=bounds.REGISTRY_MAX_BYTES)
        except ValueTooLarge as e:      # refused like a corrupt one; that revision not again
            self.metrics.registry_refused("too_large")
            shared.note_error(f"registry unreadable, keeping the last good one: {e}")
            self.revision = e.mod_revision or self.revision
            return True
        except StoreError as e:
            shared.note_error(f"registry read: {e}")
            return False
        if kv is not None:
            try:
                reg = regdoc.decode(kv.value)
                back = regdoc.went_back(shared.registry, reg)
                if back is not None:
                    raise RegistryError(back)
                if shared.registry is not None and reg.lineage != shared.registry.lineage:
                    log.warning("registry lineage changed from %s to %s at generation %d",
                                shared.registry.lineage or "-", reg.lineage or "-",
                                reg.generation)
                newer = ver.newer_note("registry", reg.schema_version)
                if newer and (shared.registry is None
                              or shared.registry.schema_version != reg.schema_version):
                    log.warning("%s: %s", keys.REGISTRY, newer)
                before, shared.registry = shared.registry, reg
                self.metrics.observe_registry(reg)
                if before is not None and own_changed(before, reg, shared.config.host):
                    await self.journal(before, reg)
            except RegistryError as e:
                self.metrics.registry_refused("corrupt")
                shared.note_error(f"registry unreadable, keeping the last good one: {e}")
            self.revision = kv.mod_revision
        return True

    async def journal(self, before: Registry, after: Registry) -> None:
        """Log the history's entries about this host's cards between two registries read."""
        host = self.shared.config.host
        try:
            kv = await self.store.get(keys.HISTORY, timeout=self.shared.config.etcd.call_timeout,
                                      max_value_bytes=bounds.HISTORY_MAX_BYTES)
            ring = histdoc.decode(kv.value) if kv is not None else histdoc.EMPTY
        except (StoreError, histdoc.HistoryError) as e:
            log.warning("%s: its cards changed at registry generation %d, but the history "
                        "says why only on the leader now: %s", host, after.generation, e)
            return
        ring_id, seq = self.logged
        new = own_entries(ring.entries, host, before.generation, after.generation,
                          seq if ring.ring == ring_id else 0)
        for entry in new:
            level, line = histdoc.journal(entry)
            log.log(level, "%s", line, extra={"card": entry.card, "card_host": entry.host})
        if new:
            self.logged = (ring.ring, new[-1].seq)
