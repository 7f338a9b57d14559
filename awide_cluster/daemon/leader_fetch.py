"""The leader cycle's reads from etcd: the reports, the registry, the intents, the leader key,
the history ring, the gateway records and the operator windows, all at once within one call
bound (sorted by the pure ``leader_read``). A base of ``LeaderLoop`` (``daemon/leader.py``),
whose ``__init__`` sets the attributes named here."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from awide_cluster.contract import bounds, keys, records
from awide_cluster.contract import report as reportdoc
from awide_cluster.contract.untrusted import WINDOW_REQUEST_CORRUPT, WINDOWS_CORRUPT
from awide_cluster.daemon.leader_read import (
    LeaderRead,
    StoredHistory,
    StoredRegistry,
    history_found,
    registry_found,
    registry_schema,
    sort_intents,
    sort_reports,
    sort_window_requests,
    windows_found,
)
from awide_cluster.daemon.leader_switchover import SwitchoverHandling
from awide_cluster.daemon.reconcile import ClusterSnapshot
from awide_cluster.store.errors import ValueTooLarge
from awide_cluster.store.types import KeyValue, PrefixRead

if TYPE_CHECKING:
    from awide_cluster.api.metrics import DaemonMetrics

log = logging.getLogger("awide_cluster.leader")


async def _kept(value: PrefixRead) -> PrefixRead:
    return value


class LeaderFetch(SwitchoverHandling):
    metrics: DaemonMetrics | None
    reports_memo: reportdoc.ReportMemo
    _registry_kept: tuple[int, bytes, StoredRegistry] | None
    registry_decodes: int
    gateway_records: PrefixRead | None

    async def read(self, *, gateways: bool = True) -> LeaderRead:
        """Every read of one cycle; StoreError if any failed. A registry that cannot be used
        (missing, corrupt, unknown schema, too large) is said in ``found``/``problem``: the
        cycle repairs it. ``gateways``: read the gateway records too (what they read decides
        the registry schema; a cycle out of turn keeps the last poll cycle's)."""
        t = self.call_timeout
        (members, reg_kv, intents, leader_kv, ring, gw), (win_kv, asks) = await asyncio.gather(
            asyncio.gather(
                self.store.read_prefix(keys.MEMBERS, max_keys=bounds.MEMBERS_MAX_KEYS,
                                       max_value_bytes=bounds.REPORT_MAX_BYTES, timeout=t),
                self._get_registry(t),
                self.store.read_prefix(keys.INTENTS, max_keys=bounds.INTENTS_MAX_KEYS,
                                       max_value_bytes=bounds.RECORD_MAX_BYTES, timeout=t),
                self.store.get(keys.LEADER, timeout=t),
                self._get_history(t),
                self._get_gateways(t) if gateways or self.gateway_records is None
                else _kept(self.gateway_records)),
            asyncio.gather(                 # the operator windows (decision_windows)
                self._get_windows(t),
                self.store.read_prefix(keys.WINDOW_REQUESTS, max_keys=bounds.INTENTS_MAX_KEYS,
                                       max_value_bytes=bounds.RECORD_MAX_BYTES, timeout=t)),
        )
        self.gateway_records = gw
        members.complete()   # more hosts than the bound: TooManyKeys, the cycle counts nothing
        if self.metrics is not None:
            self.metrics.intents_pending.set(intents.count)
        if intents.more:
            log.warning("%d intents pending, over the bound of %d per cycle: the first %d now, "
                        "the others at the next cycles", intents.count, intents.max_keys,
                        intents.max_keys)
        for r in (*members.refused.values(), *intents.refused.values()):
            if r.kind == "key":
                log.warning("key %s ignored: %s", r.name, r.why)
        hosts = sort_reports(members, self.policy.hosts, self.reports_memo.decode)
        stored = self._registry_found(reg_kv)
        intents = self._take_switchover(intents)
        good_intents, bad_intents = sort_intents(intents)
        good_asks, bad_asks = sort_window_requests(asks)
        windows, windows_problem = windows_found(win_kv)
        if self.metrics is not None:
            if windows_problem:
                self.metrics.value_refused(WINDOWS_CORRUPT)
            for _ in bad_asks:
                self.metrics.value_refused(WINDOW_REQUEST_CORRUPT)
        snap = ClusterSnapshot(reports=hosts.reports, bad_reports=hosts.bad,
                        registry=stored.registry, intents=good_intents,
                        bad_intents=bad_intents, strangers=hosts.strangers,
                        windows=windows, windows_problem=windows_problem,
                        window_requests=good_asks, bad_window_requests=bad_asks,
                        wall=records.parse_time(self.clock.wall()) or 0.0,
                        registry_schema=registry_schema(hosts.reports.values(), gw))
        return LeaderRead(snapshot=snap, registry_rev=stored.revision, leader_kv=leader_kv,
                    found=stored.found, problem=stored.problem, history=ring)

    def _registry_found(self, kv: KeyValue | ValueTooLarge | None) -> StoredRegistry:
        """``registry_found``, not decoded again while etcd holds the same value at the same
        revision (the leader's registry changes only when it writes one)."""
        if not isinstance(kv, KeyValue):
            return registry_found(kv)
        kept = self._registry_kept
        if kept is not None and kept[0] == kv.mod_revision and kept[1] == kv.value:
            return kept[2]
        stored = registry_found(kv)
        self.registry_decodes += 1
        self._registry_kept = (kv.mod_revision, kv.value, stored)
        return stored

    async def _get_gateways(self, timeout: float) -> PrefixRead:
        return await self.store.read_prefix(keys.GATEWAYS, max_keys=bounds.CLUSTER_MAX_KEYS,
                                            max_value_bytes=bounds.RECORD_MAX_BYTES,
                                            timeout=timeout)

    async def _get_history(self, timeout: float) -> StoredHistory | None:
        """The history ring, read only when this term does not hold it (its first cycle, or
        after a write that was not confirmed); None when it is not read."""
        if self.history is not None:
            return None
        try:
            kv = await self.store.get(keys.HISTORY, timeout=timeout,
                                      max_value_bytes=bounds.HISTORY_MAX_BYTES)
        except ValueTooLarge as e:
            return history_found(e)
        return history_found(kv)

    async def _get_windows(self, timeout: float) -> KeyValue | ValueTooLarge | None:
        """The windows in force (``windows``), within their bound."""
        try:
            return await self.store.get(keys.WINDOWS, timeout=timeout,
                                        max_value_bytes=bounds.WINDOWS_MAX_BYTES)
        except ValueTooLarge as e:
            return e

    async def _get_registry(self, timeout: float) -> KeyValue | ValueTooLarge | None:
        """The registry's key-value; a ``ValueTooLarge`` (its mod_revision named) when it is
        over its bound: repaired like a corrupt one, not read again while unchanged (the store
        remembers the refusal)."""
        try:
            return await self.store.get(keys.REGISTRY, timeout=timeout,
                                        max_value_bytes=bounds.REGISTRY_MAX_BYTES)
        except ValueTooLarge as e:
            return e

