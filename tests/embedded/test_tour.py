"""The tour in quick mode, and the live demo, as a user runs them from a source checkout:
``python -m awide_harness.demo`` (what ``make demo`` runs)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from awide_harness.waits import wait_until_sync
from tests.timing import bound

from .support import etcd_or_skip, processes_under, wait_no_processes

DEMO = [sys.executable, "-m", "awide_harness.demo"]
REPO = Path(__file__).resolve().parents[2]
EVENTS = ["card_sick", "card_back", "card_added", "leader_killed", "leader_restarted",
          "etcd_member_frozen", "card_sick_member_frozen", "etcd_member_thawed"]


def test_quick_tour_converges_and_leaves_no_process(tmp_path):
    binary = etcd_or_skip()
    report = tmp_path / "tour.json"
    work = tmp_path / "work"
    p = subprocess.run(DEMO + ["--scenario", "tour", "--quick", "--report", str(report),
                              "--work-dir", str(work), "--etcd", binary],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    doc = json.loads(report.read_text())
    assert doc["converged"] and doc["ok"] and doc["problems"] == [], doc["problems"]
    assert [e["name"] for e in doc["events"]] == EVENTS
    gateways = doc["cluster"]["gateways"]
    assert len(gateways) == 2
    for e in doc["events"]:
        assert e["agreed"] and e["converged"], e
        assert all(e["checks"].values()), e["checks"]
        if e["figure"]:
            assert set(e["seen"]) == set(gateways)
            assert all(v is not None and 0 <= v <= e["bound"] for v in e["seen"].values()), e
    for name in ("detection", "return", "join", "leader_election", "leader_handover",
                 "restart", "detection_member_frozen", "return_after_thaw"):
        f = doc["figures"][name]
        assert f["seconds"] is not None and f["within_bound"], (name, f)
    # the card added by the tour is in the report's cluster facts, and was admitted
    assert "s2/c2" in doc["cluster"]["cards"]
    assert "CONVERGED" in p.stdout and "detection" in p.stdout
    assert wait_no_processes(work) == {}


def test_live_demo_shows_status_and_ctrl_c_stops_everything(tmp_path):
    binary = etcd_or_skip()
    work = tmp_path / "work"
    out = tmp_path / "out.txt"
    with open(out, "w") as f:
        p = subprocess.Popen(DEMO + ["--quick", "--work-dir", str(work), "--etcd", binary,
                                    "--refresh", "0.5"], stdout=f, stderr=subprocess.STDOUT,
                             cwd=REPO)
    try:
        def running() -> None:
            assert p.poll() is None, out.read_text()[-3000:]

        wait_until_sync(lambda: "all gateways agree" in out.read_text(), 60,
                        "the demo says all gateways agree", poll=0.2, check=running)
        started = set(processes_under(work)) - {p.pid}
        assert len(started) == 3 + 3 + 4 + 2     # etcd, daemons, store services, gateways
        # a control file makes a card's store die: both gateways show it out
        mark = len(out.read_text())
        (work / "cluster" / "control" / "kill-store-s2-c0").touch()
        wait_until_sync(lambda: out.read_text()[mark:].count("3/4 cards in service") >= 2, 60,
                        "both gateways show 3/4 cards in service", poll=0.2, check=running)
        assert "kill-store s2/c0: done" in out.read_text()[mark:]
        p.send_signal(signal.SIGINT)
        assert p.wait(bound(30)) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text = out.read_text()
    assert "stopped: no process left behind" in text
    for host in ("s1", "s2", "w1"):
        assert host in text
    assert wait_no_processes(work) == {}
