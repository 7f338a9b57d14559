"""``awide-cluster run`` as a real subprocess: SIGSTOP, SIGKILL, SIGHUP, SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import yaml

from awide_cluster.cards.directory import read_label
from awide_cluster.contract import keys
from awide_cluster.contract.records import LeaderRecord
from awide_cluster.contract.registry import card_id
from awide_cluster.daemon.service import Daemon
from tests.timing import wait_until

from .conftest import config_dict, make_config, registry, store_of

RUN = [sys.executable, "-c", "from awide_cluster.cli.main import main; main()"]


def cid_of(path) -> str:
    lab = read_label(path)
    return card_id(lab.serial, lab.model, lab.identity)


class Proc:
    def __init__(self, tmp_path, name: str, cfg: dict) -> None:
        self.config = tmp_path / f"{name}.yaml"
        self.write(cfg)
        self.log = open(tmp_path / f"{name}.log", "wb")
        self.p = subprocess.Popen(RUN + ["run", "--config", str(self.config)],
                                  stdout=self.log, stderr=subprocess.STDOUT)

    def write(self, cfg: dict) -> None:
        self.config.write_text(yaml.safe_dump(cfg))

    def signal(self, sig: int) -> None:
        self.p.send_signal(sig)

    def close(self) -> str:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGCONT)
            self.p.kill()
            self.p.wait(5)
        self.log.close()
        return open(self.log.name, encoding="utf-8", errors="replace").read()


async def leader_host(store) -> str | None:
    kv = await store.get(keys.LEADER)
    rec = LeaderRecord.decode(kv.value) if kv else None
    return rec.host if rec else None


async def test_frozen_daemon_loses_its_cards_then_reload_and_clean_stop(
        etcd, cluster_name, cards, tmp_path):
    h1 = Daemon(make_config(etcd, cluster_name, "h1", []), serve_api=False)
    store = store_of(etcd, cluster_name)
    p0 = cards.make("c0", "SN0")
    p1 = cards.make("c1", "SN1")
    cfg = config_dict(etcd, cluster_name, "h2", [cards.spec("c0")])
    proc = None
    try:
        await h1.start()
        await wait_until(lambda: h1.is_leader, 5, "h1 leads")
        proc = Proc(tmp_path, "h2", cfg)
        A = cid_of(p0)
        await wait_until(lambda: _is(store, A, "in"), 15, "h2's card in")
        # SIGSTOP: its report stops advancing (the card goes out after 3 polls), then its
        # lease expires and the report vanishes
        proc.signal(signal.SIGSTOP)
        await wait_until(lambda: _is(store, A, "out"), 10, "frozen host's card out")
        assert "report of h2 did not advance" in (await registry(store)).card(A).reason
        await wait_until(lambda: _gone(store, keys.member("h2")), 10, "frozen host's lease gone")
        await wait_until(lambda: _reason_has(store, A, "no report from h2"), 5, "reason updated")
        assert (await registry(store)).card(A).state == "out"
        # SIGCONT: it grants a new lease, reports again, the card comes back
        proc.signal(signal.SIGCONT)
        await wait_until(lambda: _is(store, A, "in"), 10, "card back in after thaw")
        # SIGHUP: reload with a second card
        cfg["cards"].append(cards.spec("c1"))
        proc.write(cfg)
        proc.signal(signal.SIGHUP)
        await wait_until(lambda: _is(store, cid_of(p1), "in"), 10, "reloaded card admitted")
        assert proc.p.poll() is None
        # SIGTERM: exit 0, report gone at once (lease revoked)
        proc.signal(signal.SIGTERM)
        assert proc.p.wait(10) == 0
        assert await store.get(keys.member("h2")) is None
    finally:
        log = proc.close() if proc else ""
        await h1.stop()
        await store.close()
    assert "config reloaded" in log


async def test_sigkilled_leader_is_replaced_after_its_lease(etcd, cluster_name, tmp_path):
    store = store_of(etcd, cluster_name)
    proc = Proc(tmp_path, "h2", config_dict(etcd, cluster_name, "h2", []))
    h1 = Daemon(make_config(etcd, cluster_name, "h1", []), serve_api=False)
    try:
        await wait_until(lambda: _leader_is(store, "h2"), 15, "h2 leads")
        await h1.start()
        await wait_until(lambda: h1.turns >= 3, 5, "h1 polling")
        assert not h1.is_leader
        old = await store.get(keys.LEADER)
        proc.signal(signal.SIGKILL)
        killed = time.monotonic()
        await wait_until(lambda: h1.is_leader, 10, "h1 leads after the kill")
        # not before the dead leader's lease could expire (TTL 1 s; generous slack)
        assert time.monotonic() - killed > 0.3
        new = await store.get(keys.LEADER)
        assert new.lease == h1.lease.id and new.create_revision != old.create_revision
    finally:
        proc.close()
        await h1.stop()
        await store.close()


async def test_refuses_a_small_etcd_cluster_unless_dev(etcd_binaries, tmp_path, cluster_name):
    from awide_harness import EtcdCluster
    binary = next(iter(etcd_binaries.values()))
    with EtcdCluster(tmp_path / "one", size=1, binary=binary, stop_timeout=0.5) as one:
        cfg = make_config(one, cluster_name, "h1", [])
        d = Daemon(cfg, serve_api=False)
        await d.start()
        assert await d.wait() == 3
        assert "1 member(s)" in d.fatal and "dev_cluster" in d.fatal
        await d.stop()
        store = store_of(one, cluster_name)
        assert await store.get(keys.member("h1")) is None        # nothing written
        dev = Daemon(make_config(one, cluster_name, "h1", [], dev=True))
        try:
            await dev.start()
            kv = await wait_until(lambda: store.get(keys.member("h1")), 5, "dev report")
            assert json.loads(kv.value)["dev_cluster"] is True
            view = dev.view()
            assert view["dev_cluster"] is True and "DEVELOPMENT CLUSTER" in view["warning"]
        finally:
            await dev.stop()
            await store.close()


async def _is(store, cid, state) -> bool:
    r = await registry(store)
    c = r.card(cid) if r else None
    return c is not None and c.state == state


async def _leader_is(store, host) -> bool:
    return await leader_host(store) == host


async def _gone(store, key) -> bool:
    return await store.get(key) is None


async def _reason_has(store, cid, text) -> bool:
    r = await registry(store)
    entry = r.card(cid) if r is not None else None
    return entry is not None and text in entry.reason
