"""Status while etcd fails: quorum lost, a frozen member, a frozen or absent cluster; and
report ages measured over reads."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from awide_cluster.contract import keys
from awide_cluster.contract import report as reportdoc
from awide_cluster.operator.gather import StatusReader
from awide_cluster.operator.render import render
from awide_cluster.operator.snapshot import StatusPolicy
from awide_cluster.store.types import EndpointStatus
from awide_harness.ports import reserve_port
from tests.operator import op_state as state
from tests.operator.op_fixtures import cluster_name, shared_etcd  # noqa: F401
from tests.timing import bound, wait_until

CLI = [sys.executable, "-m", "awide_cluster.cli.main"] if False else [
    str(Path(sys.executable).with_name("awide-cluster"))]


DEFAULT_POLICY = StatusPolicy()


async def _status(etcd, cluster, policy=DEFAULT_POLICY):
    store = state.store_for(etcd.endpoints, cluster)
    try:
        reader = StatusReader(store, cluster=cluster, endpoints=etcd.endpoints, policy=policy)
        t0 = time.monotonic()
        _, st = await reader.sample(0)
        return st, time.monotonic() - t0
    finally:
        await store.close()


async def raft_leaders(endpoints) -> dict[str, int]:
    """The raft leader each of ``endpoints`` names (0: none); members that do not answer are
    left out."""
    store = state.store_for(endpoints, "c1")
    try:
        answers = await store.statuses()
    finally:
        await store.close()
    return {ep: st.leader for ep, st in answers.items() if isinstance(st, EndpointStatus)}


async def member_id(endpoint) -> int:
    store = state.store_for([endpoint], "c1")
    try:
        st = (await store.statuses())[endpoint]
    finally:
        await store.close()
    assert isinstance(st, EndpointStatus), st
    return st.member_id


async def test_quorum_lost_is_named_and_keys_still_shown(etcd3):
    await state.awrite(etcd3.endpoints, "c1", state.healthy_state("c1"))
    etcd3.kill(1)
    etcd3.kill(2)
    survivor = etcd3.endpoints[0]

    async def survivor_without_leader() -> bool:
        return (await raft_leaders([survivor])).get(survivor) == 0

    await wait_until(survivor_without_leader, 5, "the survivor sees no raft leader")
    st, took = await _status(etcd3, "c1")
    assert took < bound(3.0)
    assert st.etcd.quorum == "lost" and st.etcd.up == 0 and st.etcd.total == 3
    assert {"quorum_lost", "etcd_member_down"} <= {p.code for p in st.problems}
    assert sum(p.code == "etcd_member_down" for p in st.problems) == 2
    assert "serializable" in st.read_error       # what the surviving member holds
    assert len(st.cards) == 3 and not st.healthy
    assert "quorum lost (0 of 3 members up, 2 needed, 1 answering)" in render(st, "table")


async def test_frozen_member_is_down_within_the_bound(shared_etcd, cluster_name):
    await state.awrite(shared_etcd.endpoints, cluster_name, state.healthy_state(cluster_name))
    frozen = await member_id(shared_etcd.endpoints[2])
    shared_etcd.freeze(2)
    others = shared_etcd.endpoints[:2]

    async def others_agree_on_a_live_leader() -> bool:
        leaders = await raft_leaders(others)
        return len(leaders) == 2 and len(set(leaders.values())) == 1 and \
            not set(leaders.values()) & {0, frozen}

    try:
        await wait_until(others_agree_on_a_live_leader, 5, "a raft leader other than the frozen")
        st, took = await _status(shared_etcd, cluster_name)
    finally:
        shared_etcd.thaw(2)
    assert took < bound(2.5)
    down = [p for p in st.problems if p.code == "etcd_member_down"]
    assert len(down) == 1 and shared_etcd.endpoints[2] in down[0].message
    assert st.etcd.quorum == "ok" and st.etcd.up == 2
    assert len(st.cards) == 3 and st.read_error == ""
    shared_etcd.wait_healthy()


def _run_cli(args: list[str], timeout: float = 15.0) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    r = subprocess.run(CLI + args, capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "COLUMNS": "200"})
    return r, time.monotonic() - t0


def test_dead_etcd_is_one_clear_line_within_the_bound():
    eps = ",".join(f"http://127.0.0.1:{p}" for p in (reserve_port() for _ in range(3)))
    r, took = _run_cli(["status", "--endpoints", eps, "--cluster", "c1"])
    assert r.returncode == 3                       # unreachable, not unhealthy
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("awide-cluster: etcd unreachable: no member")
    assert "Traceback" not in r.stderr
    assert took < bound(5.0)


def test_frozen_etcd_does_not_hang_status(etcd3):
    for i in range(3):
        etcd3.freeze(i)
    try:
        r, took = _run_cli(["status", "--endpoints", ",".join(etcd3.endpoints), "--cluster",
                            "c1", "-o", "json"])
        rc, out = _run_cli(["cards", "--endpoints", ",".join(etcd3.endpoints), "--cluster",
                            "c1"])
    finally:
        for i in range(3):
            etcd3.thaw(i)
    assert r.returncode == 3 and rc.returncode == 3
    assert "etcd unreachable" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert took < bound(5.0) and out < bound(5.0)


async def test_report_age_measured_over_reads(shared_etcd, cluster_name):
    kvs = state.healthy_state(cluster_name)
    await state.awrite(shared_etcd.endpoints, cluster_name, kvs)
    store = state.store_for(shared_etcd.endpoints, cluster_name)
    clock = [100.0]                     # the reader's monotonic clock, moved by hand
    try:
        reader = StatusReader(store, cluster=cluster_name, endpoints=shared_etcd.endpoints,
                              policy=StatusPolicy(stale_after=0.5, behind_grace=60),
                              mono=lambda: clock[0])
        _, first = await reader.snapshot()
        assert all(h.report_age.describe() == "?" for h in first.hosts)
        clock[0] += 0.2
        cards = [state.card("h1", "card0", "SN-A1"), state.card("h1", "card1", "SN-A2")]
        await state.awrite(shared_etcd.endpoints, cluster_name,
                           {keys.member("h1"): reportdoc.encode(state.report("h1", cards, seq=2))})
        _, second = await reader.snapshot()
        ages = {h.host: h.report_age for h in second.hosts}
        assert ages["h1"].at_most is not None and ages["h1"].at_most < 5.0   # changed between
        assert ages["h2"].at_most is None and ages["h2"].at_least >= 0.2     # unchanged
        clock[0] += 0.6
        _, third = await reader.snapshot()
        stale = {p.subject for p in third.problems if p.code == "report_stale"}
        assert stale == {"h1", "h2", "w1"}
        assert ">=0." in render(third, "table") or ">=1." in render(third, "table")
    finally:
        await store.close()
