"""A witness host goes down on a whole embedded cluster (its daemon killed, its etcd member
killed): no card depends on it, so nothing goes out, but status must not say OK: it warns (exit
1, WARNING) naming the host (``daemon_down w1``) and the quorum margin (``2 of 3 members up;
one more failure loses writes``); once both are back, exit 0 again."""

from __future__ import annotations

import json
import subprocess

import pytest

from awide_harness.cluster import EmbeddedCluster
from awide_harness.procs import CLI
from awide_harness.spec import ClusterSpec, Timing
from awide_harness.waits import wait_until_sync
from tests.embedded.support import etcd_or_skip

BOUND = 60.0                      # generous deadline of every wait (a loaded 2-core machine)

pytestmark = pytest.mark.timeout(300)


def status(c: EmbeddedCluster, *args: str) -> tuple[int, str]:
    """status as an operator on s1 runs it: with s1's config (its hosts: s1, s2, w1)."""
    p = subprocess.run(CLI + ["status", "--config", str(c.config_path("s1")),
                              "--sample", "0", *args],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout


def codes(doc: dict) -> set[str]:
    return {p["code"] for p in doc["problems"]}


def test_a_witness_down_is_a_warning_naming_it_and_the_quorum_margin(tmp_path):
    spec = ClusterSpec(cluster="wit", storage_hosts=2, cards_per_host=1, witness_hosts=1,
                       gateways=1, timing=Timing.quick(), etcd_binary=etcd_or_skip(),
                       first_leader="s1")
    with EmbeddedCluster(tmp_path, spec) as c:
        wait_until_sync(lambda: status(c)[0] == 0, BOUND, "status OK with every host up",
                        poll=0.1)
        member = c.member_of("w1")
        assert member is not None
        c.kill_daemon("w1")
        c.etcd.kill(member)

        def warned() -> tuple[int, dict] | None:
            code, out = status(c, "-o", "json")
            doc = json.loads(out) if out.startswith("{") else {"problems": []}
            return (code, doc) if {"daemon_down", "etcd_member_down"} <= codes(doc) else None
        code, doc = wait_until_sync(warned, BOUND, "status names the witness down", poll=0.1)
        assert code == 1 and doc["verdict"] == "warn" and doc["state"] == "WARNING", doc
        down = {p["code"]: p for p in doc["problems"]}
        assert down["daemon_down"]["subject"] == "w1" and down["daemon_down"]["severity"] == \
            "warning"
        assert "one more failure loses writes" in down["etcd_member_down"]["message"]
        assert doc["etcd"]["margin"] == "2 of 3 members up; one more failure loses writes"
        assert all(card["state"] == "in" for card in doc["cards"])      # nothing went out
        code, line = status(c, "--brief")
        assert code == 1 and line.startswith("wit WARNING: ") and "daemon_down w1" in line, line
        assert len(line.splitlines()) == 1
        code, table = status(c)
        assert code == 1 and "WARN (2 down: daemon_down, etcd_member_down)" in table, table
        # both back: OK again
        c.etcd.restart(member)
        c.restart_daemon("w1")
        wait_until_sync(lambda: status(c)[0] == 0, BOUND, "status OK once w1 is back",
                        poll=0.1)
