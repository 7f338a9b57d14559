"""Status and the daemon HTTP API against real daemons (in-process) on a real etcd."""

from __future__ import annotations

import re

import aiohttp

from awide_cluster.config import daemon as daemon_config
from awide_cluster.daemon.service import Daemon
from awide_cluster.operator.gather import StatusReader
from awide_cluster.operator.render import render
from awide_harness.presets import DirCards, config_dict
from tests.operator import op_state as state
from tests.operator.op_fixtures import cluster_name, shared_etcd  # noqa: F401
from tests.timing import bound, wait_until


def _config(etcd, cluster, host, cards, role="storage"):
    return daemon_config.parse(config_dict(etcd.endpoints, cluster, host, cards,
                                           hosts=["h1", "w1"], role=role), "<test>")


def _dir_card(root, name, serial):
    cards = DirCards(root)
    return cards.card(name, serial), cards.flag(name)


async def _until(reader, pred, timeout=10.0):
    """The first status ``pred`` holds for, read again and again within the bound."""
    async def status_if():
        _, st = await reader.snapshot()
        return st if pred(st) else None
    return await wait_until(status_if, timeout, f"a status for which {pred} holds")


async def test_status_of_running_daemons_and_their_api(shared_etcd, cluster_name, tmp_path):
    spec, flag = _dir_card(tmp_path, "card0", "SN-DIR-1")
    daemons = [Daemon(_config(shared_etcd, cluster_name, "h1", [spec])),
               Daemon(_config(shared_etcd, cluster_name, "w1", [], role="witness"))]
    store = state.store_for(shared_etcd.endpoints, cluster_name)
    reader = StatusReader(store, cluster=cluster_name, endpoints=shared_etcd.endpoints)
    try:
        for d in daemons:
            await d.start()
        # each daemon's first report is written after start() returns: wait for both
        st = await _until(reader, lambda s: s.healthy and [c.state for c in s.cards] == ["in"]
                          and len(s.hosts) == 2)
        assert st.healthy, st.problems
        assert st.leader is not None and st.leader.host in ("h1", "w1")
        assert [h.host for h in st.hosts] == ["h1", "w1"]
        (card,) = st.cards
        assert card.state == "in" and card.slot == 0 and card.target == spec["path"]
        # reports rewritten every poll: each is seen changing between two reads, recently
        # (waited for: a read that took long under load bounds the age loosely; the wait fails
        # if no pair of reads ever sees every report younger than the bound)
        st = await _until(reader, lambda s: all(h.report_age is not None
                                                and h.report_age.at_most is not None
                                                and h.report_age.at_most < bound(2.0)
                                                for h in s.hosts))
        assert [h.host for h in st.hosts] == ["h1", "w1"], [h.report_age for h in st.hosts]

        # h1's own copy of the registry: read (or written) at its next turn
        await wait_until(lambda: daemons[0].registry is not None
                         and len(daemons[0].registry.cards) == 1, 5.0,
                         "h1 holds the registry with the card")
        api = daemons[0].api
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
            for path in ("/healthz", "/readyz"):
                async with http.get(api.url + path) as r:
                    assert r.status == 200, (path, await r.text())
            async with http.get(api.url + "/v1/status") as r:
                doc = await r.json()
            assert doc["host"] == "h1" and doc["registry_cards"][0]["serial"] == "SN-DIR-1"
            async with http.get(api.url + "/metrics") as r:
                text = await r.text()
            assert re.search(r'awide_polls_total\{cluster="[^"]+",result="ok"\}', text)
            assert re.search(r'awide_local_card_healthy\{card="c[0-9a-f]{11}",card_name="card0",'
                             r'cluster="[^"]+"\} 1.0', text), text

        flag.unlink()                             # the card's store dies: out after 3 polls
        st = await _until(reader, lambda s: any(p.code == "card_out" for p in s.problems))
        assert not st.healthy and [p.code for p in st.errors] == ["card_out"]
        assert "OUT" in render(st, "table")
    finally:
        for d in daemons:
            await d.stop()
        await store.close()
