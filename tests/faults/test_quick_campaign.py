"""The quick fault campaign inside the test suite: a real cluster, every fault kind
once with its full effect, every invariant checked; any violation fails the test.

Runs ``python -m tests.faults.runner --quick`` as a child process (its own process group of
etcd members, daemons, store services and gateways; network namespaces when root). About a
minute on a 2-core machine. Another seed: ``FAULTS_SEED=9 pytest ...``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.faults.invariants import INVARIANTS
from tests.faults.schedule import KINDS

REPO = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("FAULTS_SEED", "11"))


@pytest.mark.timeout(330)
def test_quick_campaign_keeps_every_invariant(etcd_binaries, tmp_path):
    etcd = next(iter(etcd_binaries.values()))
    report = tmp_path / "report.json"
    argv = [sys.executable, "-m", "tests.faults.runner", "--seed", str(SEED),
            "--quick", "--report", str(report), "--etcd", etcd,
            "--work-dir", str(tmp_path / "work")]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    out = done.stdout[-12000:] + "\n--- stderr ---\n" + done.stderr[-4000:]
    assert report.exists(), f"no report (exit {done.returncode}):\n{out}"
    r = json.loads(report.read_text())
    assert done.returncode == 0 and r["violations_total"] == 0, f"campaign failed:\n{out}"
    assert r["faults_skipped"] == 0, out
    assert all(r["kinds"][k]["injected"] >= 1 for k in KINDS), out
    assert all(r["invariants"][i]["checks"] > 0 for i in INVARIANTS), out
    assert r["history_match"], out
