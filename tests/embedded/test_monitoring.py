"""monitoring/ against a real embedded cluster:

- every metric the alert rules and the dashboard query is exported by a real daemon, gateway
  or etcd member;
- a real Prometheus (Debian's, /usr/bin/prometheus) scrapes the cluster's daemons, gateways
  and etcd members: every dashboard query and alert expression evaluates without error and
  returns series, and a card killed in the cluster fires ``AwideCardOut`` for that card.

The rules are loaded as shipped but for their ``for:`` durations, cut to 1 s (the test cannot
wait minutes; promtool's unit tests check the durations), evaluated every second.
"""

from __future__ import annotations

import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from awide_harness.cluster import EmbeddedCluster
from awide_harness.ports import reserve_port
from awide_harness.prometheus import Prometheus, find_prometheus, scrape_targets
from awide_harness.spec import ClusterSpec, Timing
from awide_harness.views import card_out
from tests.test_monitoring import RULES, dashboard_exprs, referenced_metrics, rules
from tests.timing import bound, wait_until_sync

from .support import etcd_or_skip

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CLUSTER = "mon"
SPEC = ClusterSpec(cluster=CLUSTER, storage_hosts=2, cards_per_host=2, witness_hosts=1,
                   gateways=2, timing=Timing.quick())

# series that exist only once an etcd call failed (the error label is the error's type, not
# a bounded set that could be exported at 0): their queries must evaluate, may be empty
ONLY_AFTER_ERRORS = ("awide_etcd_call_errors_total",)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    etcd_or_skip()
    with EmbeddedCluster(tmp_path_factory.mktemp("mon"), SPEC) as c:
        yield c


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:   # noqa: S310 - a local test URL
        return r.read().decode()


def exported(url: str) -> set[str]:
    """Every sample name and family name (a labelled counter with no child yet) at ``url``."""
    names: set[str] = set()
    for fam in text_string_to_metric_families(get(url)):
        names.add(fam.name)
        names.add(fam.name + "_total" if fam.type == "counter" else fam.name)
        names.update(s.name for s in fam.samples)
    return names


def test_every_metric_the_rules_and_dashboard_query_is_exported(cluster):
    c = cluster
    gw = c.gateway_ids[0]
    daemon, gateway = exported(c.metrics_url(c.hosts[0])), exported(c.metrics_url(gw))
    etcd = exported(c.etcd.endpoints[0] + "/metrics")
    missing = sorted(m for m in referenced_metrics() if m not in daemon | gateway | etcd)
    assert not missing, f"queried by monitoring/ but exported by nobody: {missing}"


def with_bool(expr: str) -> str:
    """``expr`` with every comparison against a number made a ``bool`` one, so that it
    returns its series (0 or 1) whether or not the conditions hold (a rule may combine
    several, e.g. a card out ``unless``/``and`` silenced), and the last comparison whatever it
    compares with. Label matchers compare with
    quoted strings and are left alone."""
    found = list(re.finditer(r"(==|!=|>=|<=|>|<)(?!\s*bool)", expr))
    if found:                   # the last comparison, whatever it compares with
        end = found[-1].end()
        expr = expr[:end] + " bool" + expr[end:]
    return re.sub(r"(==|!=|>=|<=|>|<)(?!\s*bool)(?=\s*[0-9.])", r"\1 bool", expr)


def start_prometheus(work: Path, c: EmbeddedCluster, binary: str) -> Prometheus:
    """Prometheus on the shipped rules with their ``for:`` cut to 1 s, every second."""
    work.mkdir(parents=True, exist_ok=True)
    doc = yaml.safe_load(RULES.read_text())
    for g in doc["groups"]:
        for r in g["rules"]:
            r["for"] = "1s"
    (work / "alerts.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return Prometheus(work, scrape_targets(c), CLUSTER, binary, reserve_port(), interval=1.0,
                      rules=work / "alerts.yml")


def test_prometheus_evaluates_every_query_and_fires_card_out(cluster, tmp_path):
    binary = find_prometheus()
    if binary is None:
        if os.geteuid() != 0:
            pytest.skip("no Prometheus (Debian package prometheus; `make deps` installs it "
                        "as root)")
        pytest.fail("no Prometheus although root: `make deps` installs Debian's prometheus")
    c = cluster
    prom = start_prometheus(tmp_path / "prometheus", c, binary)
    try:
        wait_until_sync(prom.ready, 20.0, "Prometheus scrapes every target")
        exprs = {f"alert {r['alert']}": with_bool(r["expr"]) for r in rules()}
        exprs |= {f"dashboard: {e}": with_bool(e.replace("$cluster", CLUSTER))
                  for e in dashboard_exprs()}

        def empty() -> list[str]:
            return [name for name, e in exprs.items()
                    if not prom.query(e) and not any(m in e for m in ONLY_AFTER_ERRORS)]

        try:                                      # rate() needs two scrapes of a series
            wait_until_sync(lambda: not empty(), 20.0, "every query returns series")
        except AssertionError:
            raise AssertionError(f"queries without series: {empty()}") from None
        for e in exprs.values():                  # all evaluate (the empty ones too)
            prom.query(e)

        key = c.storage_hosts[0] + "/c0"
        cid = c.card_id(key)
        t0 = c.card_store_kill(key)
        seen = c.wait_until(card_out(cid), bound(10.0), since=t0)
        assert all(t is not None for t in seen.values()), seen

        def firing() -> list[dict[str, Any]]:
            return prom.query(f'ALERTS{{alertname="AwideCardOut",alertstate="firing",'
                              f'card="{cid}"}}')

        (alert,) = wait_until_sync(firing, 20.0, "AwideCardOut fires for the killed card")
        labels = alert["metric"]
        assert (labels["cluster"], labels["host"], labels["card_name"]) == \
            (CLUSTER, c.card_host(key), c.card(key).name)
        out = prom.query('max by (card, card_name, host, state) (awide_card_state'
                         f'{{cluster=~"{CLUSTER}",state=~"out|drained"}}) == 1')
        assert [r["metric"]["card"] for r in out] == [cid]
    finally:
        prom.stop()
