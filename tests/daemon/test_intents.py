"""Operator intents: drain / undrain / forget, in-process and through the CLI."""

from __future__ import annotations

import asyncio
import sys

import pytest
import yaml

from awide_cluster.cards.directory import read_label
from awide_cluster.contract import keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract.registry import CardEntry, Registry, card_id, slot_table
from awide_cluster.contract.slots import EMPTY
from awide_cluster.daemon.clock import SystemClock
from awide_cluster.daemon.intents import AmbiguousCard, NotApplied, UnknownCard, resolve, submit
from awide_cluster.daemon.service import Daemon
from tests.timing import wait_until

from .conftest import config_dict, make_config, registry, store_of


def cid_of(path) -> str:
    lab = read_label(path)
    return card_id(lab.serial, lab.model, lab.identity)


def entry(serial, host, name, identity="u") -> CardEntry:
    return CardEntry(id=card_id(serial, "m", identity), serial=serial, model="m",
                     identity=identity, host=host, name=name, kind="dir", state="in",
                     health="ok", reason="", admitted=1, changed_generation=1, path="/x")


def test_resolve_by_id_serial_or_host_name() -> None:
    a, b, c = entry("S1", "h1", "c0"), entry("S2", "h1", "c1"), entry("S2", "h2", "c0", "v")
    reg = Registry(cluster="c1", generation=3, leader="h1", cards=(a, b, c),
                   slots=slot_table((a, b, c), EMPTY))
    assert resolve(reg, a.id) == a
    assert resolve(reg, "S1") == a
    assert resolve(reg, "h2/c0") == c
    with pytest.raises(AmbiguousCard) as e:
        resolve(reg, "S2")
    assert b.id in str(e.value) and c.id in str(e.value)
    with pytest.raises(UnknownCard) as unknown:
        resolve(reg, "h3/c0")
    assert a.id in str(unknown.value)          # the message lists the cards there are


async def test_drain_undrain_forget(etcd, cluster_name, cards, tmp_path):
    p0, p1 = cards.make("c0", "SN0"), cards.make("c1", "SN1")
    A, B = cid_of(p0), cid_of(p1)
    d = Daemon(make_config(etcd, cluster_name, "h1", [cards.spec("c0"), cards.spec("c1")]),
               serve_api=False)
    store = store_of(etcd, cluster_name)
    clock = SystemClock()
    kw = dict(clock=clock, wait=5.0, poll=0.05, call_timeout=0.5, by="test")
    try:
        await d.start()
        await wait_until(lambda: _n_in(store, 2), 10, "two cards in")
        slots = (await registry(store)).slots
        sa, sb = slots.slot_of(A), slots.slot_of(B)
        assert {sa, sb} == {0, 1}
        res = await submit(store, "drain", "SN0", **kw)
        assert res.lines[0] == f"card {A} (SN0 on h1): in -> drained (registry generation " \
                               f"{res.after.generation})"
        assert res.after.card(A).state == "drained" and res.after.slots.slot_of(A) == sa
        assert await store.get(keys.intent(A)) is None
        # through the CLI (a subprocess): undrain by host/name
        cfg_file = tmp_path / "op.yaml"
        cfg_file.write_text(yaml.safe_dump(config_dict(etcd, cluster_name, "op", [])))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "from awide_cluster.cli.main import main; main()",
            "undrain", "h1/c0", "--config", str(cfg_file), "--wait", "5",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err.decode()
        assert f"card {A} (SN0 on h1): drained -> in" in out.decode()
        # forget a card its host no longer reports: its slot is freed, the move printed
        d.request_reload(make_config(etcd, cluster_name, "h1", [cards.spec("c0")]))
        await wait_until(lambda: _state(store, B, "out"), 10, "removed card out")
        res = await submit(store, "forget", B, **kw)
        assert res.after.card(B) is None and res.after.slots.slots[sb] is None
        assert f"card {B} (SN1 on h1): slot {sb} -> no slot" in res.lines
        assert res.after.slots.slot_of(A) == sa
        # unknown card: refused before anything is written
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "from awide_cluster.cli.main import main; main()",
            "drain", "SN404", "--config", str(cfg_file),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 1 and "no card 'SN404'" in err.decode()
        assert (await store.range(keys.INTENTS, prefix=True)).kvs == ()
    finally:
        await d.stop()
        await store.close()


async def test_intent_not_applied_without_a_leader(etcd, cluster_name):
    store = store_of(etcd, cluster_name)
    e = entry("S1", "h1", "c0")
    reg = Registry(cluster=cluster_name, generation=1, leader="h1", cards=(e,),
                   slots=slot_table((e,), EMPTY))
    await store.put(keys.REGISTRY, regdoc.encode(reg))
    try:
        with pytest.raises(NotApplied) as err:
            await submit(store, "drain", "S1", clock=SystemClock(), wait=0.3, poll=0.05,
                         call_timeout=0.5)
        assert "is a leader running" in str(err.value)
        assert await store.get(keys.intent(e.id)) is not None     # stays pending
    finally:
        await store.close()


async def _n_in(store, n) -> bool:
    r = await registry(store)
    return r is not None and sum(c.state == "in" for c in r.cards) == n


async def _state(store, cid, state) -> bool:
    r = await registry(store)
    entry = r.card(cid) if r is not None else None
    return entry is not None and entry.state == state
