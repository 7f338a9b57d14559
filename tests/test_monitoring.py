"""monitoring/: the alert rules pass ``promtool check rules`` and their unit tests
(``promtool test rules``, each alert on synthetic series); the dashboard is well formed; every
runbook link is an https link to a section of docs/operations.md (the ansible role's
``awide_runbook_base``) and every description names the first command to run. (That every
metric they query is exported by a real daemon, gateway or etcd member:
tests/embedded/test_monitoring.py.)"""

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


def runbook_base() -> str:
    """The ansible role's default ``awide_runbook_base``: where the runbook links point."""
    defaults = yaml.safe_load((ROOT / "ansible" / "roles" / "awide" / "defaults" / "main.yml")
                              .read_text())
    return str(defaults["awide_runbook_base"])


def test_every_alert_has_severity_summary_and_a_runbook_section():
    anchors = {slug(line.lstrip("#")) for line in
               (ROOT / "docs" / "operations.md").read_text().splitlines()
               if re.match(r"#{1,6} ", line)}
    prefix = runbook_base() + "#"
    assert prefix.startswith("https://"), prefix
    for r in rules():
        assert r["labels"]["severity"] in ("critical", "warning"), r["alert"]
        assert r["annotations"]["summary"], r["alert"]
        url = r["annotations"]["runbook_url"]
        assert url.startswith(prefix), (r["alert"], url)
        assert url[len(prefix):] in anchors, f"{r['alert']}: no section #{url[len(prefix):]}"


FIRST = re.compile(r"First(?:, on that host)?: `(awide-cluster|etcdctl|systemctl|journalctl) ")


def test_every_alert_has_a_description_naming_the_first_command_and_an_http_runbook():
    for r in rules():
        notes = r["annotations"]
        assert re.match(r"https?://[^\s/]+/\S*#[\w-]+$", notes["runbook_url"]), r["alert"]
        assert notes["summary"].strip() and notes["description"].strip(), r["alert"]
        assert FIRST.search(notes["description"]), \
            f"{r['alert']}: its description names no first command: {notes['description']!r}"


def test_the_unit_tests_expect_the_rules_own_runbook_links():
    """alerts.test.yml expects each alert's description and runbook link as alerts.yml has
    them (promtool compares them): no test still expects an old link."""
    links = {r["alert"]: r["annotations"]["runbook_url"] for r in rules()}
    tests = yaml.safe_load((MONITORING / "alerts.test.yml").read_text())["tests"]
    seen = 0
    for t in tests:
        for case in t["alert_rule_test"]:
            for alert in case["exp_alerts"]:
                notes = alert["exp_annotations"]
                assert notes["runbook_url"] == links[case["alertname"]], case["alertname"]
                assert notes["description"], case["alertname"]
                seen += 1
    assert seen >= len(links)


def test_the_role_points_the_runbook_links_at_another_base():
    """The ansible role's ``regex_replace`` (Python's ``re.sub``, as Ansible runs it) with
    another ``awide_runbook_base``: every link points there, anchors kept, nothing else
    changed; with the default the file is unchanged (byte for byte: tests/system/
    test_ansible.py compares what the role installs)."""
    content = next(f["content"] for t in yaml.safe_load(
        (ROOT / "ansible" / "roles" / "awide" / "tasks" / "monitoring.yml").read_text())
        for f in t.get("awide_files", {}).get("files", ())
        if f["path"].endswith("/alerts.yml"))
    m = re.search(r"regex_replace\('(.+?)', '(.+?)' ~ awide_runbook_base ~ '(.+?)'\)",
                  content)
    assert m, content
    pattern, head, tail = m.groups()

    def render(base: str) -> str:
        return re.sub(pattern, head + base.replace("\\", "\\\\") + tail, RULES.read_text())

    assert render(runbook_base()) == RULES.read_text()
    base = "https://docs.example.com/awide/ops.html"
    got = render(base)
    theirs = [r for g in yaml.safe_load(got)["groups"] for r in g["rules"]]
    assert [r["annotations"]["runbook_url"] for r in theirs] == [
        base + r["annotations"]["runbook_url"][len(runbook_base()):] for r in rules()]
    assert got.replace(base, runbook_base()) == RULES.read_text()


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
