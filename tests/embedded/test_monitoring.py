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

import json
import os
import re
import shutil
import subprocess
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
from awide_harness.procs import free_port
from awide_harness.spec import ClusterSpec, Timing
from awide_harness.views import card_out
from tests.test_monitoring import RULES, dashboard_exprs, referenced_metrics, rules
from tests.timing import bound, wait_until_sync

from .support import etcd_or_skip

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CLUSTER = "mon"
SPEC = ClusterSpec(cluster=CLUSTER, storage_hosts=2, cards_per_host=2, witness_hosts=1,
                   gateways=2, timing=Timing.quick())
PROMETHEUS = "/usr/bin/prometheus"

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


def hostport(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc


def test_every_metric_the_rules_and_dashboard_query_is_exported(cluster):
    c = cluster
    gw = c.gateway_ids[0]
    daemon, gateway = exported(c.metrics_url(c.hosts[0])), exported(c.metrics_url(gw))
    etcd = exported(c.etcd.endpoints[0] + "/metrics")
    missing = sorted(m for m in referenced_metrics() if m not in daemon | gateway | etcd)
    assert not missing, f"queried by monitoring/ but exported by nobody: {missing}"


def with_bool(expr: str) -> str:
    """``expr`` with its last comparison made a ``bool`` one, so that it returns its series
    (0 or 1) whether or not the condition holds."""
    found = list(re.finditer(r"(==|!=|>=|<=|>|<)(?!\s*bool)", expr))
    if not found:
        return expr
    end = found[-1].end()
    return expr[:end] + " bool" + expr[end:]


class Prometheus:
    def __init__(self, work: Path, c: EmbeddedCluster, binary: str) -> None:
        work.mkdir(parents=True, exist_ok=True)
        doc = yaml.safe_load(RULES.read_text())
        for g in doc["groups"]:
            for r in g["rules"]:
                r["for"] = "1s"
        (work / "alerts.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
        self.targets = {
            "awide-cluster": [hostport(c.api_url(h)) for h in c.hosts],
            "awide-gateway": [hostport(c.metrics_url(g)) for g in c.gateway_ids],
            "awide-etcd": [hostport(u) for u in c.etcd.endpoints],
        }
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                       "scrape_timeout": "900ms"},
            "rule_files": [str(work / "alerts.yml")],
            "scrape_configs": [
                {"job_name": job, "static_configs": [
                    {"targets": t, **({"labels": {"cluster": CLUSTER}}
                                      if job == "awide-etcd" else {})}]}
                for job, t in self.targets.items()],
        }
        (work / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = open(work / "prometheus.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [binary, f"--config.file={work / 'prometheus.yml'}",
             f"--storage.tsdb.path={work / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            return json.loads(get(url))
        except urllib.error.HTTPError as e:      # a bad query: its JSON error; else the text
            body = e.read().decode(errors="replace")
            try:
                return json.loads(body)
            except ValueError:
                return {"status": "error", "error": f"HTTP {e.code}: {body[:200]}"}

    def query(self, expr: str) -> list[dict[str, Any]]:
        doc = self.api("query", query=expr)
        assert doc.get("status") == "success", f"{expr}: {doc.get('error', doc)}"
        return list(doc["data"]["result"])

    def ready(self) -> bool:
        try:
            up = self.query("up")
        except (OSError, AssertionError):
            return False
        want = sum(len(t) for t in self.targets.values())
        return len(up) == want and all(r["value"][1] == "1" for r in up)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.log.close()


def test_prometheus_evaluates_every_query_and_fires_card_out(cluster, tmp_path):
    binary = PROMETHEUS if Path(PROMETHEUS).is_file() else shutil.which("prometheus")
    if binary is None:
        if os.geteuid() != 0:
            pytest.skip("no Prometheus (Debian package prometheus; `make deps` installs it "
                        "as root)")
        pytest.fail("no Prometheus although root: `make deps` installs Debian's prometheus")
    c = cluster
    prom = Prometheus(tmp_path / "prometheus", c, binary)
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
