"""monitoring/: the alert rules pass ``promtool check rules`` and their unit tests
(``promtool test rules``, each alert on synthetic series); the dashboard is well formed; every
runbook link names a section of docs/operations.md. (That every metric they query is exported
by a real daemon, gateway or etcd member: tests/embedded/test_monitoring.py.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
MONITORING = ROOT / "monitoring"
RULES = MONITORING / "alerts.yml"
DASHBOARD = MONITORING / "dashboard.json"
METRIC = re.compile(r"\b(?:awide|etcd)_[a-z0-9_]+\b")


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.geteuid() != 0:
            pytest.skip("no promtool (Debian package prometheus; `make deps` installs it as root)")
        pytest.fail("no promtool although root: `make deps` installs Debian's prometheus")
    return found


def rules() -> list[dict]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def dashboard_exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in doc["panels"] for t in p.get("targets", ())]


def referenced_metrics() -> set[str]:
    """Every awide_/etcd_ metric name the rules and the dashboard query."""
    exprs = [r["expr"] for r in rules()] + dashboard_exprs()
    return {m for e in exprs for m in METRIC.findall(e)}


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_promtool_checks_the_rules():
    p = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"SUCCESS: {len(rules())} rules found" in p.stdout + p.stderr


def test_promtool_unit_tests_of_every_alert():
    p = subprocess.run([promtool(), "test", "rules", "alerts.test.yml"], cwd=MONITORING,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    tested = set(re.findall(r"alertname: (\w+)", (MONITORING / "alerts.test.yml").read_text()))
    assert tested == {r["alert"] for r in rules()}, "every alert has a unit test"


def test_every_alert_has_severity_summary_and_a_runbook_section():
    anchors = {slug(line.lstrip("#")) for line in
               (ROOT / "docs" / "operations.md").read_text().splitlines()
               if re.match(r"#{1,6} ", line)}
    prefix = "file:///usr/share/doc/awide-cluster/operations.md#"
    for r in rules():
        assert r["labels"]["severity"] in ("critical", "warning"), r["alert"]
        assert r["annotations"]["summary"], r["alert"]
        url = r["annotations"]["runbook_url"]
        assert url.startswith(prefix), (r["alert"], url)
        assert url[len(prefix):] in anchors, f"{r['alert']}: no section #{url[len(prefix):]}"


def test_dashboard_is_well_formed():
    doc = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    assert {v["name"] for v in doc["templating"]["list"]} == {"datasource", "cluster"}
    for p in doc["panels"]:
        if p["type"] == "row":
            continue
        assert p["targets"] and all(t["expr"] for t in p["targets"]), p["title"]
        assert all('cluster=~"$cluster"' in t["expr"] for t in p["targets"]), p["title"]
    titles = " ".join(p["title"] for p in doc["panels"]).lower()
    for want in ("slot table", "cards in service", "staleness", "leader", "etcd"):
        assert want in titles


def test_the_metrics_queried_are_documented():
    doc = (ROOT / "docs" / "metrics.md").read_text()
    missing = sorted(m for m in referenced_metrics() if f"`{m}`" not in doc
                     and f"`{re.sub(r'_(bucket|sum|count)$', '', m)}`" not in doc)
    assert not missing, f"queried but not in docs/metrics.md: {missing}"
