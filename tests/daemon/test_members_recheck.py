"""The daemon reads the etcd member list again while it runs: a cluster that shrank under 3
voting members is shown (``/v1/status`` view, ``awide_etcd_voting_members``) and logged, a
learner is not counted as a voter, and the daemon keeps running. On a cluster of its own
(members are removed and added through etcd's own member API)."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request

from awide_cluster.contract import keys
from awide_cluster.daemon.service import Daemon
from awide_cluster.store import EtcdStore, StoreConfig
from awide_cluster.store.codec import member
from awide_harness import EtcdCluster
from tests.timing import wait_until

from .conftest import make_config, metric_value


def _post(endpoint: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(endpoint + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read(1 << 20))


def _change(endpoint: str, path: str, body: dict) -> dict | None:
    """A membership change; None while etcd refuses it as unsafe (503 "unhealthy cluster":
    etcd takes no member change until every member has been connected for 5 s)."""
    try:
        return _post(endpoint, path, body)
    except urllib.error.HTTPError as e:
        if e.code == 503:
            return None
        raise


async def test_a_shrunk_cluster_is_shown_and_a_learner_does_not_count(
        etcd_binaries, tmp_path, cards, caplog):
    caplog.set_level(logging.INFO, logger="awide_cluster.daemon")
    binary = next(iter(etcd_binaries.values()))
    with EtcdCluster(tmp_path / "etcd", binary=binary, stop_timeout=0.5) as etcd:
        d = Daemon(make_config(etcd, "m1", "h1", [cards.spec("h1c0")]))
        cards.make("h1c0", "SN-h1c0")
        d.members_recheck = 0.2
        try:
            await d.start()
            await wait_until(lambda: d.cluster_size == 3 and d.turns >= 1, what="3 voters")
            ep = etcd.endpoints[0]
            # a learner (never started): listed as a member, not a voter
            added = await wait_until(lambda: _change(ep, "/v3/cluster/member/add", {
                "peerURLs": ["http://127.0.0.1:1"], "isLearner": True}), timeout=20.0,
                what="a learner added")
            assert member(added["member"]).is_learner
            listed = _post(ep, "/v3/cluster/member/list", {})["members"]
            assert len(listed) == 4
            turns = d.turns
            await wait_until(lambda: d.turns >= turns + 3, what="turns after the learner")
            assert d.cluster_size == 3 and not d.view()["etcd_too_small"]
            # remove the learner and one voter (not the one the test talks to): 2 voters
            gone = next(m for m in map(member, listed)
                        if not m.is_learner and ep not in m.client_urls)
            for mid in (int(added["member"]["ID"]), gone.id):
                await wait_until(lambda m=mid: _change(ep, "/v3/cluster/member/remove",
                                                     {"ID": m}), timeout=20.0,
                               what=f"member {mid:x} removed")
            await wait_until(lambda: d.cluster_size == 2, what="the daemon sees 2 voters")
            assert d.view()["etcd_too_small"] is True
            assert metric_value(d.metrics.etcd_voting_members) == 2
            assert any("now has 2 voting member(s)" in r.getMessage()
                       and r.levelno == logging.WARNING for r in caplog.records)
            # and keeps running: its report still advances
            async with EtcdStore(StoreConfig(endpoints=(ep,), prefix=keys.prefix("m1"),
                                             call_timeout=2.0)) as s:
                seq = d.seq
                await wait_until(lambda: d.seq > seq + 2, what="reports go on")
                assert await s.get(keys.MEMBERS + "h1") is not None
            assert d.fatal == "" and d.turn_errors == 0
        finally:
            await d.stop()
