"""EmbeddedCluster: it starts real processes, sees faults through the gateways, and stops
without leaving any process behind (also when its caller crashes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from awide_harness.cluster import EmbeddedCluster, EmbeddedClusterError
from awide_harness.spec import ClusterSpec, Timing
from awide_harness.views import card_in, card_out

from .support import etcd_or_skip, processes_under, wait_no_processes

SMALL = ClusterSpec(cluster="small", storage_hosts=1, cards_per_host=1, witness_hosts=0,
                    gateways=1, timing=Timing.quick())


def test_small_cluster_sees_a_fault_and_stop_leaves_no_process(tmp_path):
    etcd_or_skip()
    c = EmbeddedCluster(tmp_path, SMALL)
    with c:
        pids = c.pids()
        # 3 etcd members, 1 store service, 1 daemon, 1 gateway
        assert len(pids) == 6, pids
        assert set(processes_under(tmp_path)) >= set(pids.values())
        assert c.leader_host() == "s1"
        reg = c.registry()
        assert reg is not None and [x.id for x in reg.cards] == [c.card_id("s1/c0")]
        (gw,) = c.gateway_ids
        t0 = c.card_store_kill("s1/c0")
        seen = c.wait_until(card_out(c.card_id("s1/c0")), 8.0, since=t0)
        assert seen[gw] is not None and seen[gw] >= t0
        t1 = c.card_store_start("s1/c0")
        back = c.wait_until(card_in(c.card_id("s1/c0")), 8.0, since=t1)
        assert back[gw] is not None and back[gw] >= t1
        assert c.agree()
        assert any(e["kind"] == "out" for e in c.events(gw))
    assert wait_no_processes(tmp_path) == {}
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    c.stop()                                       # idempotent


def test_a_bad_spec_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(EmbeddedClusterError, match="lease_ttl"):
        EmbeddedCluster(tmp_path, ClusterSpec(timing=Timing(poll_interval=1.0, lease_ttl=1)))
    assert processes_under(tmp_path) == {}


_CRASHER = textwrap.dedent("""
    import os, signal, sys
    from awide_harness.cluster import EmbeddedCluster
    from awide_harness.spec import ClusterSpec, Timing
    spec = ClusterSpec(cluster="crash", storage_hosts=1, cards_per_host=1, witness_hosts=0,
                       gateways=0, timing=Timing.quick())
    c = EmbeddedCluster(sys.argv[1], spec).start()     # no `with`: nobody calls stop()
    print(len(c.pids()), flush=True)
    if sys.argv[2] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)          # parent-death signal must clean up
    raise RuntimeError("caller crashed midway")       # atexit must clean up
""")


@pytest.mark.parametrize("how", ["exception", "kill"])
def test_a_crashed_caller_leaves_no_process(tmp_path, how):
    etcd_or_skip()
    p = subprocess.run([sys.executable, "-c", _CRASHER, str(tmp_path), how],
                       capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "5", (p.stdout, p.stderr[-2000:])   # 3 etcd, store, daemon
    if how == "kill":
        assert p.returncode == -signal.SIGKILL
    else:
        assert "caller crashed midway" in p.stderr
    assert wait_no_processes(tmp_path) == {}
