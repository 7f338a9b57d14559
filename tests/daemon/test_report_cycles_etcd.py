"""Report cycles on real etcd: the leader polls every 5 s here while the card's host polls
every 0.1 s, so a card taken out (and back in) well before the leader's next poll, by a
cycle its log names as run on a report's arrival, is the members/ watch's doing."""

from __future__ import annotations

import logging

from awide_cluster.contract import keys
from awide_cluster.contract.report import encode
from awide_cluster.daemon.service import Daemon
from awide_harness.presets import FAST
from tests.timing import wait_until

from .builders import card, report
from .conftest import card_state, make_config, store_of
from .test_leader_watch_etcd import SLOW_POLL

ARRIVAL = "(on a report's arrival)"
LEADER = "awide_cluster.leader"


async def test_a_card_goes_out_and_back_on_its_hosts_reports_not_the_leaders_poll(
        etcd, cluster_name, cards, caplog):
    caplog.set_level(logging.INFO, logger=LEADER)
    lead = Daemon(make_config(etcd, cluster_name, "h1", timing=SLOW_POLL))
    cards.make("h2c0", "SN-h2c0")
    host = Daemon(make_config(etcd, cluster_name, "h2", [cards.spec("h2c0")], timing=FAST))
    store = store_of(etcd, cluster_name)
    try:
        await lead.start()
        await wait_until(lambda: lead.is_leader, timeout=12.0, what="h1 leads")
        await host.start()
        # admitted on its first report's arrival, not at h1's next poll
        cid = await wait_until(lambda: _card_id(lead), what="the card admitted")
        assert await card_state(store, cid) == "in"
        for healthy, state in ((False, "out"), (True, "in")):
            cards.set_healthy("h2c0", healthy)
            await wait_until(lambda s=state: _is(store, cid, s), what=f"the card {state}")
            # the leader logs the change once etcd answered the commit, in the history's
            # words ("gen 7 out card <id> (h2/h2c0): ..."): wait for the line (the leader's
            # own: the card's host logs the same words when it follows the registry)
            said = await wait_until(lambda s=state: [
                r.getMessage() for r in caplog.records
                if r.name == LEADER and f" {s} card {cid}" in r.getMessage()],
                what=f"the leader's line for the card {state}")
            assert said[-1].endswith(ARRIVAL), said
        assert lead.report_cycles.get("wrote", 0) >= 3      # admitted, out, in
        assert lead.turn_errors == 0 and host.turn_errors == 0
    finally:
        await host.stop()
        await lead.stop()
        await store.close()


async def test_hostile_reports_on_the_watch_start_nothing_and_stop_nothing(
        etcd, cluster_name, cards):
    """Garbage, a report naming another host and a stranger's report arrive on the watch:
    no report cycle runs for them (nothing in them is news), the watch and the poll go on,
    and a real report's news still runs one."""
    lead = Daemon(make_config(etcd, cluster_name, "h1", timing=SLOW_POLL))
    store = store_of(etcd, cluster_name)
    try:
        await lead.start()
        await wait_until(lambda: lead.is_leader, timeout=12.0, what="h1 leads")
        await wait_until(lambda: (lead.shared.term.is_set()
                                  and lead.leader_loop.registry is not None),
                       what="h1's term begun, its registry written")
        before = dict(lead.report_cycles)
        forged = report("h3", 7, card("c0", "SN-forged"))
        for key, value in ((f"{keys.MEMBERS}h2", b"\xff" * 1000),
                           (f"{keys.MEMBERS}h2", encode(forged)),       # names h3
                           (f"{keys.MEMBERS}stranger", encode(report("stranger", 1)))):
            await store.put(key, value)
        # a real report with news: the only one that runs a cycle
        await store.put(f"{keys.MEMBERS}h3", encode(forged))
        await wait_until(lambda: sum(lead.report_cycles.values()) > sum(before.values()),
                       what="a report cycle for h3's report")
        assert sum(lead.report_cycles.values()) == sum(before.values()) + 1
        assert lead.watches_running
        assert lead.turn_errors == 0
    finally:
        await lead.stop()
        await store.close()


def _card_id(d: Daemon) -> str | None:
    reg = d.leader_loop.registry
    return reg.cards[0].id if reg is not None and reg.cards else None


async def _is(store, cid: str, state: str) -> bool:
    return await card_state(store, cid) == state
