"""The quick demo tour on a secured cluster (``demo --secure``): etcd on TLS with
authentication on, every daemon and gateway its own least-privilege user; every event
converges as without it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.embedded.support import etcd_or_skip
from tests.embedded.test_tour import EVENTS

DEMO = [sys.executable, "-m", "awide_harness.demo"]
REPO = Path(__file__).resolve().parents[2]


def test_quick_tour_converges_with_least_privilege_users(tmp_path):
    binary = etcd_or_skip()
    report = tmp_path / "tour.json"
    work = tmp_path / "work"
    p = subprocess.run(DEMO + ["--scenario", "tour", "--quick", "--secure", "--report",
                               str(report), "--work-dir", str(work), "--etcd", binary],
                       capture_output=True, text=True, timeout=150, cwd=REPO)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    doc = json.loads(report.read_text())
    assert doc["converged"] and doc["ok"] and doc["problems"] == [], doc["problems"]
    assert [e["name"] for e in doc["events"]] == EVENTS
    configs = list((work / "cluster" / "config").glob("*.yaml"))
    assert len(configs) == 5
    for cfg in configs:
        text = cfg.read_text()
        assert "https://" in text and "http://" not in text and "username: " in text, text
    for log in (work / "cluster" / "logs").glob("*.log"):
        assert "permission denied" not in log.read_text(errors="replace"), log
