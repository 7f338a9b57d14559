"""A gateway restarted while every etcd member is frozen serves the slot table of its state
file, marked stale, and takes the live registry as soon as etcd answers (real etcd)."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

import pytest

from awide_cluster.contract import keys
from awide_cluster.operator.gather import StatusReader
from awide_cluster.operator.model import Problem
from awide_cluster.operator.render import gateway_summary
from awide_cluster.store import EtcdStore
from awide_gateway_cluster import state_file as sf
from tests.gateway.support import config, gateway, in_service, served
from tests.timing import wait_until

pytestmark = pytest.mark.timeout(60)


def _saved_generation(path: Path, cluster: str) -> int:
    got = sf.read(path, cluster=cluster, now=time.time(), max_age=3600)
    return got.generation if isinstance(got, sf.SavedState) else 0


async def test_a_gateway_restarted_in_an_etcd_outage_serves_its_state_file(
        etcd, leader, store: EtcdStore, world, cluster_name, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    cards = served(world, 3)
    reg = await leader.publish(cards)
    state_dir = tmp_path / "gw-state"
    cfg = config(cluster_name, etcd.endpoints, world, pod="vllm-0", watch=True,
                 state={"dir": str(state_dir), "max_age": 3600})
    path = sf.path_for(state_dir, cfg.id)

    gw = gateway(cfg, world)
    await gw.start()
    try:
        await wait_until(lambda: all(in_service(gw, c.id) for c in cards))
        await wait_until(lambda: _saved_generation(path, cluster_name) == reg.generation,
                         what="the accepted registry is in the state file")
        before = gw.snapshot()
        assert before.saved_at is None
    finally:
        await gw.stop()

    frozen = range(len(etcd.endpoints))
    for i in frozen:
        etcd.freeze(i)
    try:
        again = gateway(cfg, world)
        t0 = time.monotonic()
        await again.start()
        try:
            started = time.monotonic() - t0
            # the state file's table at once (no probe needed for that), its cards in service
            # within one poll interval of start() returning (start waits for their first probe)
            assert again.snapshot().table == before.table
            await wait_until(lambda: all(in_service(again, c.id) for c in cards),
                             timeout=cfg.timing.poll_interval,
                             what="the state file's cards in service")
            served_after = time.monotonic() - t0
            print(f"\nstart() in an etcd outage returned after {started:.3f} s; the state "
                  f"file's {len(cards)} cards in service {served_after:.3f} s after the call")
            view = again.snapshot()
            assert view.table == before.table and view.generation == before.generation
            assert view.saved_at is not None
            st = again.stats()
            assert st.stale and st.state_file_age is not None and st.state_file_age >= 0
            assert st.problem.startswith("serving the state file (generation "), st.problem
            assert "serving from its state file, marked stale" in caplog.text
        finally:
            for i in frozen:
                etcd.thaw(i)
        await wait_until(lambda: not again.stats().stale and again.snapshot().saved_at is None,
                         what="etcd's registry replaces the state file")
        st = again.stats()
        assert st.state_file_age is None and st.state_note.startswith(
            f"replaced by etcd's generation {reg.generation}")
        assert again.snapshot().table == before.table
        assert all(in_service(again, c.id) for c in cards)

        # status, once etcd answers, says the gateway served its state file, how old and
        # until when (its record keeps saying so for a while)
        reader = StatusReader(store, cluster=cluster_name, endpoints=etcd.endpoints)

        async def shown() -> Problem | None:
            _, status = await reader.snapshot()
            return next((p for p in status.problems if p.code == "gateway_state_file"
                         and p.subject == cfg.id
                         and "when etcd's registry replaced it" in p.message), None)

        problem = await wait_until(shown, what="status shows the state file served")
        assert problem.severity == "warning" and not problem.holds, problem
        assert "served its state file (saved " in problem.message, problem.message
        _, status = await reader.snapshot()
        gv = next(g for g in status.gateways if g.id == cfg.id)
        assert gv.state_since and gv.state_until and gv.state_age >= 0
        assert not gv.stale and gv.generation == reg.generation
        assert f"served state file: {cfg.id}" in gateway_summary(status.gateways,
                                                                 reg.generation)
    finally:
        await again.stop()


async def test_a_state_file_of_another_cluster_is_refused_at_start(
        etcd, leader, world, cluster_name, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    cards = served(world, 1)
    await leader.publish(cards)
    state_dir = tmp_path / "gw-state"
    cfg = config(cluster_name, etcd.endpoints, world, pod="vllm-1",
                 state={"dir": str(state_dir)})
    path = sf.path_for(state_dir, cfg.id)
    reg = leader.reg
    assert reg is not None
    sf.write(path, sf.SavedState(cluster="other-cluster", prefix=keys.prefix("other-cluster"),
                                 gateway=cfg.id, registry=replace(reg, cluster="other-cluster"),
                                 layout=None, saved_at=time.time()))
    for i in range(len(etcd.endpoints)):
        etcd.freeze(i)
    try:
        g = gateway(cfg, world)
        await g.start()
        try:
            assert g.snapshot().generation == 0 and g.snapshot().saved_at is None
            assert "belongs to cluster other-cluster" in g.stats().state_note
            assert "it starts with what etcd says" in caplog.text
        finally:
            await g.stop()
    finally:
        for i in range(len(etcd.endpoints)):
            etcd.thaw(i)
