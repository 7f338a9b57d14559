"""A write outage seen by the daemons, turn by turn, on real etcd: the NOSPACE alarm raised
through etcd's Maintenance API (every write refused, reads answered, as with a full quota).

The daemon counts and shows its refused report writes (``/v1/status`` ``write_error``,
``/readyz``, ``awide_writes_refused_total``); the leader, told that its own report write
failed, judges the cycle a write outage and counts no report that did not advance; after the
alarm is disarmed one cycle is a new baseline, and a daemon that stays frozen loses its card
after sick_polls cycles. A registry transaction that failed makes the next cycle an outage too.
"""

from __future__ import annotations

import re

from awide_cluster.cards.directory import read_label
from awide_cluster.contract.registry import card_id
from awide_cluster.daemon.leader import CycleOutcome
from awide_cluster.daemon.service import Daemon
from awide_cluster.store import EtcdStore, StoreConfig
from awide_cluster.store.build import store_config

from .conftest import TURN_CALL, TURNS, make_config, metrics_text, registry, store_of
from .stores import RefusingTxn


def cid_of(path) -> str:
    lab = read_label(path)
    return card_id(lab.serial, lab.model, lab.identity)


def daemon(etcd, cluster, host, specs) -> Daemon:
    return Daemon(make_config(etcd, cluster, host, specs, timing=TURNS, call=TURN_CALL),
                  serve_api=False)


class Alarms:
    """Raise and disarm etcd's NOSPACE alarm (what a full backend quota raises)."""

    def __init__(self, etcd) -> None:
        self.store = EtcdStore(StoreConfig(endpoints=tuple(etcd.client_urls), prefix="",
                                           call_timeout=2.0))

    async def nospace(self) -> None:
        member = (await self.store.endpoint_status(self.store.config.endpoints[0])).member_id
        await self.store.write("/v3/maintenance/alarm", {"action": "ACTIVATE",
                                                         "alarm": "NOSPACE",
                                                         "memberID": str(member)},
                               2.0, "alarm activate")
        assert [a.alarm for a in await self.store.alarms()] == ["NOSPACE"]

    async def disarm(self) -> None:
        for a in await self.store.alarms():
            await self.store.write("/v3/maintenance/alarm", {"action": "DEACTIVATE",
                                                             "alarm": a.alarm,
                                                             "memberID": str(a.member_id)},
                                   2.0, "alarm deactivate")
        assert await self.store.alarms() == ()

    async def close(self) -> None:
        await self.store.close()


def metric(d: Daemon, pattern: str) -> float:
    m = re.search("^" + pattern + r" (\S+)$", metrics_text(d), re.M)
    return float(m.group(1)) if m else 0.0


async def test_refused_writes_are_an_outage_not_a_card_failure(etcd, cluster_name, cards):
    a, b = cid_of(cards.make("c0", "SN1")), cid_of(cards.make("c1", "SN2"))
    d1 = daemon(etcd, cluster_name, "h1", [cards.spec("c0")])
    d2 = daemon(etcd, cluster_name, "h2", [cards.spec("c1")])
    store = store_of(etcd, cluster_name)
    alarms = Alarms(etcd)
    try:
        for _ in range(2):
            await d1.turn()
            await d2.turn()
        assert d1.is_leader and not d2.is_leader
        gen = (await registry(store)).generation
        await alarms.nospace()
        try:
            for _ in range(6):                      # twice sick_polls: nobody can write
                await d2.turn()
                await d1.turn()
            assert d1.outcomes[-6:] == [CycleOutcome.UNCHANGED] * 6
            for d in (d1, d2):
                err = d.view()["write_error"]
                assert (err["write"], err["reason"], err["in_a_row"]) == ("report", "nospace", 6)
                assert "database space exceeded" in err["error"]
                v = d.health.readiness()
                assert not v.ok and v.reason.startswith("writes fail: host report not written")
                assert metric(d, r'awide_writes_refused_total\{reason="nospace",'
                                 r'write="report"\}') == 6
            assert "own writes fail" in d1.view()["write_outage"]
            assert d2.view()["write_outage"] is None                # not the leader
            assert metric(d1, "awide_write_outage") == 1
            reg = await registry(store)
            assert reg.generation == gen and reg.card(a).state == reg.card(b).state == "in"
        finally:
            await alarms.disarm()
        await d1.turn()            # writes back; h2 has not written yet: a new baseline
        assert d1.view()["write_error"] is None and d1.health.readiness().ok
        assert d1.view()["write_outage"] is None and metric(d1, "awide_write_outage") == 0
        states = []
        for _ in range(3):         # h2 stays frozen: its card goes out after sick_polls
            await d1.turn()
            states.append((await registry(store)).card(b).state)
        assert states == ["in", "in", "out"]
        reg = await registry(store)
        assert reg.card(a).state == "in" and "did not advance" in reg.card(b).reason
    finally:
        await alarms.close()
        await d1.stop()
        await d2.stop()
        await store.close()


async def test_a_refused_registry_write_makes_the_next_cycle_an_outage(etcd, cluster_name,
                                                                      cards):
    cards.make("c0", "SN1")
    cfg = make_config(etcd, cluster_name, "h1", [cards.spec("c0")])
    refusing = RefusingTxn(store_config(cfg.etcd, cluster_name))
    d = Daemon(cfg, store=refusing, serve_api=False)
    try:
        await d.turn()
        refusing.refuse = True
        cards.set_healthy("c0", False)              # a change to write: the txn is refused
        await d.turn()
        assert d.outcomes[-1] is CycleOutcome.ERROR
        assert d.leader_loop.txn_failure.startswith("registry write: ")
        assert metric(d, r'awide_writes_refused_total\{reason="nospace",'
                         r'write="registry"\}') == 1
        await d.turn()                              # told of the failed write: an outage
        assert "registry write" in d.leader_loop.outage
        refusing.refuse = False
        await d.turn()                              # written: the failure is not kept
        assert d.outcomes[-1] is CycleOutcome.WROTE and d.leader_loop.txn_failure == ""
    finally:
        await d.stop()
        await refusing.close()
