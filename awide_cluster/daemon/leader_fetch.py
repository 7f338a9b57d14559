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
from awide_cluster.store.bounded import MAX_PAGE_KEYS
from awide_cluster.store.errors import BadResponse, ValueTooLarge
from awide_cluster.store.types import (
    FolderRead,
    KeyRead,
    KeyValue,
    ManyGot,
    ManyRead,
    PrefixRead,
    RangeResult,
)

if TYPE_CHECKING:
    from awide_cluster.api.metrics import DaemonMetrics

log = logging.getLogger("awide_cluster.leader")


async def _kept(value: PrefixRead | None) -> PrefixRead | None:
    return value


# gateway records in the cycle's one request while fewer than this were read last time (a
# page of a prefix read); more go alone, paged
GATEWAYS_IN_ONE = MAX_PAGE_KEYS
_GATEWAYS = FolderRead(keys.GATEWAYS, bounds.CLUSTER_MAX_KEYS, bounds.RECORD_MAX_BYTES)


def _folder(got: ManyGot) -> PrefixRead:
    if not isinstance(got, PrefixRead):
        raise BadResponse(f"read_many: a prefix answered as a key ({type(got).__name__})")
    return got


def _key(got: ManyGot) -> KeyValue | ValueTooLarge | None:
    if isinstance(got, (PrefixRead, RangeResult)):
        raise BadResponse(f"read_many: a key answered as a {type(got).__name__}")
    return got


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
        the registry schema; a cycle out of turn keeps the last poll cycle's). One request
        for them all (``Store.read_many``: a read-only transaction, one revision), each read
        bounded as alone; the gateway records go alone when the last read of them held more
        than a page of keys."""
        t = self.call_timeout
        read_gateways = gateways or self.gateway_records is None
        gw_alone = read_gateways and self.gateway_records is not None and \
            len(self.gateway_records.kvs) + len(self.gateway_records.refused) >= GATEWAYS_IN_ONE
        reads: list[ManyRead] = [
            FolderRead(keys.MEMBERS, bounds.MEMBERS_MAX_KEYS, bounds.REPORT_MAX_BYTES),
            KeyRead(keys.REGISTRY, bounds.REGISTRY_MAX_BYTES),
            FolderRead(keys.INTENTS, bounds.INTENTS_MAX_KEYS, bounds.RECORD_MAX_BYTES),
            KeyRead(keys.LEADER),
            KeyRead(keys.WINDOWS, bounds.WINDOWS_MAX_BYTES),
            FolderRead(keys.WINDOW_REQUESTS, bounds.INTENTS_MAX_KEYS, bounds.RECORD_MAX_BYTES),
        ]
        if self.history is None:        # this term does not hold the ring: read it
            reads.append(KeyRead(keys.HISTORY, bounds.HISTORY_MAX_BYTES))
        if read_gateways and not gw_alone:
            reads.append(_GATEWAYS)
        many, gw_read = await asyncio.gather(
            self.store.read_many(reads, timeout=t),
            self._get_gateways(t) if gw_alone else _kept(self.gateway_records))
        members, intents, asks = (_folder(many[0]), _folder(many[2]), _folder(many[5]))
        reg_kv, leader_kv, win_kv = _key(many[1]), _key(many[3]), _key(many[4])
        if isinstance(leader_kv, ValueTooLarge):        # not bounded: never refused
            raise BadResponse(f"{keys.LEADER}: {leader_kv}")
        ring = history_found(_key(many[6])) if self.history is None else None
        gw = _folder(many[-1]) if read_gateways and not gw_alone else gw_read
        assert gw is not None
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
