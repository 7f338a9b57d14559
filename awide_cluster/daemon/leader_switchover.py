"""The leader's handling of a switchover request (``switchover``, ``intents/switchover``):
set apart from the card intents when a cycle reads them, then answered (granted: the leadership
handed over, or refused; fenced) after a poll cycle that left the registry current. A base of
``LeaderLoop`` (``daemon/leader.py``), whose ``__init__`` sets the attributes named here."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

from awide_cluster.contract import history_ring as histdoc
from awide_cluster.contract import keys, records
from awide_cluster.contract.registry import Registry
from awide_cluster.contract.report import HostReport
from awide_cluster.daemon import switchover
from awide_cluster.daemon.clock import Clock
from awide_cluster.daemon.lease import Leadership
from awide_cluster.daemon.reconcile import Policy
from awide_cluster.store.errors import StoreError
from awide_cluster.store.port import Store
from awide_cluster.store.types import PrefixRead

log = logging.getLogger("awide_cluster.leader")


class SwitchoverHandling:
    store: Store
    leadership: Leadership
    clock: Clock
    policy: Policy
    call_timeout: float
    registry: Registry | None
    reports: Mapping[str, HostReport]
    history: histdoc.History | None
    # a switchover request read in this cycle, with its mod_revision
    switchover: tuple[records.SwitchoverRecord, int] | None
    _switchover_refused: str

    def _take_switchover(self, intents: PrefixRead) -> PrefixRead:
        """``intents/switchover`` set apart from the card intents (``switchover``): a request
        is kept for this cycle's end; a granted one (a hand-over in progress) is left to its
        lease."""
        self.switchover = None
        kv = next((kv for kv in intents.kvs if kv.key == keys.SWITCHOVER), None)
        if kv is None:
            return intents
        try:
            rec = records.decode_switchover(kv.value)
            if not rec.granted:
                self.switchover = (rec, kv.mod_revision)
        except records.RecordError as e:
            if str(e) != self._switchover_refused:
                log.warning("%s", e)
            self._switchover_refused = str(e)
        return replace(intents, kvs=tuple(k for k in intents.kvs if k.key != keys.SWITCHOVER))


    async def _answer_switchover(self, request: records.SwitchoverRecord,
                                 mod_revision: int) -> bool:
        """Grant (hand over, step down: True, the cycle's outcome is DEPOSED) or refuse a
        switchover request, fenced."""
        ld = self.leadership
        self.switchover = None
        if not ld.is_leader or ld.revision is None:
            return False
        reg = self.registry
        try:
            got = await switchover.answer(
                self.store, request=request, mod_revision=mod_revision, reports=self.reports,
                leader=self.policy.leader, hosts=self.policy.hosts,
                leader_revision=ld.revision, ttl=ld.lease.ttl,
                generation=reg.generation if reg is not None else 0, ring=self.history,
                wall=self.clock.wall(), call_timeout=self.call_timeout)
        except StoreError as e:
            self.history = None
            log.warning("switchover not answered yet: %s", e)
            return False
        self.history = None         # the ring changed (or not): read it again next cycle
        if not got.applied:
            log.info("switchover not answered: the leader key or the request changed since "
                     "they were read")
            return False
        if got.target is None:
            log.warning("switchover%s refused: %s",
                        f" by {request.by}" if request.by else "", got.why)
            return False
        ld.step_down(f"switchover{f' by {request.by}' if request.by else ''}: leadership "
                     f"handed over to {got.target}", level=logging.INFO)
        return True

