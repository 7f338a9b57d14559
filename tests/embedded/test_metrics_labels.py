"""The label conventions of /metrics, scraped from real daemons and a real gateway of an
embedded cluster: ``card`` is the card id and ``card_name`` its name wherever a card is meant
(so the daemons' and the gateway's series join), ``cluster`` on every series, no ``_created``."""

from __future__ import annotations

import dataclasses
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from awide_harness import netns
from awide_harness.cluster import EmbeddedCluster
from awide_harness.spec import ClusterSpec, Timing
from tests.timing import bound, wait_until_sync

from .support import etcd_or_skip

SPEC = ClusterSpec(cluster="labels", storage_hosts=2, cards_per_host=2, witness_hosts=1,
                   gateways=1, timing=Timing.quick())

CARD_METRICS = ("awide_local_card_healthy", "awide_probe_results_total", "awide_card_state",
                "awide_gateway_card_in_service")


def scrape(url: str) -> list[Sample]:
    with urllib.request.urlopen(url, timeout=5) as r:   # noqa: S310 - a local test URL
        text = r.read().decode()
    return [s for fam in text_string_to_metric_families(text) for s in fam.samples]


def cards_of(samples: list[Sample], name: str) -> set[tuple[str, str]]:
    return {(s.labels["card"], s.labels["card_name"]) for s in samples if s.name == name}


@pytest.mark.parametrize("network", ["loopback", "netns"])
def test_card_labels_join_every_series_has_cluster_and_none_is_created(tmp_path, network):
    etcd_or_skip()
    if network == "netns":
        ok, why = netns.available()
        if not ok:
            pytest.skip(why)
    with EmbeddedCluster(tmp_path, dataclasses.replace(SPEC, network=network)) as c:
        want = {(c.card_id(k), c.card(k).name) for k in c.cards}
        (gw,) = c.gateway_ids
        urls = {h: c.metrics_url(h) for h in c.hosts} | {gw: c.metrics_url(gw)}

        def complete() -> dict[str, list[Sample]] | None:
            got = {who: scrape(u) for who, u in urls.items()}
            seen = {name: set().union(*(cards_of(s, name) for s in got.values()))
                    for name in CARD_METRICS}
            every = all(cards_of(got[h], "awide_card_state") == want for h in c.hosts)
            return got if every and all(v == want for v in seen.values()) else None

        got = wait_until_sync(complete, bound(20.0),
                              "every card in every card metric and every daemon's registry")
        for who, samples in got.items():
            assert samples, who
            no_cluster = [s for s in samples if s.labels.get("cluster") != "labels"]
            assert not no_cluster, (who, no_cluster[:3])
            created = [s.name for s in samples if s.name.endswith("_created")]
            assert not created, (who, created[:3])
        for h in c.hosts:                       # a daemon labels its own cards only
            mine = {(c.card_id(k), c.card(k).name) for k in c.cards_of(h)}
            assert cards_of(got[h], "awide_local_card_healthy") == mine
            assert cards_of(got[h], "awide_card_state") == want
        gw_samples = got[gw]
        assert {s.labels["gateway"] for s in gw_samples} == {gw}
        in_service = {s.labels["card"]: s.value for s in gw_samples
                      if s.name == "awide_gateway_card_in_service"}
        assert in_service == {cid: 1.0 for cid, _ in want}
        gen = [s.value for s in gw_samples if s.name == "awide_gateway_registry_generation"]
        assert gen and gen[0] >= 1
        # beside /metrics, the readiness a pod's probe asks: a registry accepted, layout verified
        ready_url = c.metrics_url(gw).removesuffix("/metrics") + "/readyz"
        with urllib.request.urlopen(ready_url, timeout=5) as r:   # noqa: S310 - a local test URL
            assert r.status == 200
            assert r.read().decode().endswith("accepted, key layout verified\n")
