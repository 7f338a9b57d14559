"""The gateway against real etcd (3 members) and a fake NVMe initiator."""

from __future__ import annotations

import json
import re

import pytest

from tests.gateway.support import (
    config,
    gateway,
    in_service,
    make_card,
    serve,
    served,
    serving_gateway,
)
from tests.timing import wait_until

pytestmark = pytest.mark.timeout(60)


async def test_connects_registry_cards_and_serves_them(etcd, leader, world, cluster_name):
    a, b = served(world, 2)
    await leader.publish([a, b])
    gw = gateway(config(cluster_name, etcd.endpoints, world), world)
    await gw.start()
    try:
        await wait_until(lambda: in_service(gw, a.id) and in_service(gw, b.id), what="both in")
        view = gw.snapshot()
        assert view.generation == 1
        assert [s.card_id for s in view.slots[:2]] == [a.id, b.id]
        assert view.card(a.id).device.startswith("/dev/nvme")
        assert view.layout_ok
    finally:
        await gw.stop()


async def test_two_gateways_different_times_and_orders_get_identical_slots(
        etcd, leader, world, world_b, cluster_name):
    cards = [make_card(n, admitted=n) for n in range(1, 5)]
    # host a's initiator learns the targets in one order, host b's in the reverse order
    for c in cards:
        serve(world, c)
    for c in reversed(cards):
        serve(world_b, c)
    await leader.publish([cards[2]])
    g1 = gateway(config(cluster_name, etcd.endpoints, world, pod="a"), world)
    await g1.start()
    g2 = None
    try:
        await leader.publish([cards[2], cards[0]])
        await leader.publish([cards[2], cards[0], cards[3]])
        reg = await leader.publish([cards[3], cards[1], cards[2], cards[0]])
        g2 = gateway(config(cluster_name, etcd.endpoints, world_b, pod="b"), world_b)
        await g2.start()
        for g in (g1, g2):
            await wait_until(lambda g=g: g.snapshot().generation == reg.generation
                           and all(in_service(g, c.id) for c in cards), what="all in")
        v1, v2 = g1.snapshot(), g2.snapshot()
        assert v1.table == v2.table == reg.slots
        assert [s.card_id for s in v1.slots] == [s.card_id for s in v2.slots]
        assert v1.fingerprint == v2.fingerprint
        # the card seen first by the leader holds slot 0 everywhere
        assert v1.slots[0].card_id == cards[2].id
    finally:
        if g2 is not None:
            await g2.stop()
        await g1.stop()


async def test_new_card_connected_within_two_polls(etcd, leader, world, cluster_name):
    a, b = served(world, 2)
    await leader.publish([a])
    gw = gateway(config(cluster_name, etcd.endpoints, world, timing={"poll_interval": 0.8}),
                 world)
    await gw.start()
    try:
        await wait_until(lambda: in_service(gw, a.id))
        before = gw.stats()
        reg = await leader.publish([a, b])
        await wait_until(lambda: gw.stats().generation >= reg.generation, what="new generation")
        after = gw.stats()
        # counted in answered polls, not in time: a poll that timed out on a loaded machine
        # is not one that could have seen the card; the one in flight during the write may
        # have read the old registry, the next one reads the new
        assert (after.polls - after.failed_polls) - (before.polls - before.failed_polls) <= 2
        await wait_until(lambda: in_service(gw, b.id), what="new card in service")
        assert any(c[0] == "connect" and f"--nqn={b.target.subnqn}" in c for c in world.calls())
    finally:
        await gw.stop()


async def test_card_out_and_back_by_registry(etcd, leader, world, cluster_name):
    from tests.gateway.support import with_state
    a, b = served(world, 2)
    await leader.publish([a, b])
    gw = gateway(config(cluster_name, etcd.endpoints, world, watch=True), world)
    sub = gw.subscribe()
    await gw.start()
    try:
        await wait_until(lambda: in_service(gw, a.id) and in_service(gw, b.id))
        dev = gw.snapshot().card(a.id).device
        await leader.publish([with_state(a, "out"), b])
        await wait_until(lambda: not in_service(gw, a.id), what="a out")
        s = gw.snapshot().card(a.id)
        assert s.slot == 0 and s.why.startswith("registry: out")   # keeps its slot
        assert in_service(gw, b.id)
        assert gw.placement.dialog("t").generation == 2
        await leader.publish([a, b])
        await wait_until(lambda: in_service(gw, a.id), what="a back")
        assert gw.snapshot().card(a.id).device == dev            # never disconnected
        assert not any(c[0] == "disconnect" for c in world.calls())
        kinds = []
        while (e := sub.get_nowait()) is not None:
            if e.card_id == a.id:
                kinds.append(e.kind)
        assert kinds[-2:] == ["out", "back"]
    finally:
        await gw.stop()


async def test_local_io_errors_take_a_card_out_after_sick_polls_and_back(
        etcd, leader, world, cluster_name):
    async with serving_gateway(etcd, leader, world, cluster_name) as (gw, a):
        def report_then_out() -> bool:            # keep reporting until it goes out
            gw.report_io_error(a.id)
            return not in_service(gw, a.id)

        await wait_until(report_then_out, 10, "out after reported I/O errors")
        s = gw.snapshot().card(a.id)
        assert "I/O error" in s.why and "2 bad polls" in s.why
        await wait_until(lambda: in_service(gw, a.id), what="back once healthy")


async def test_target_restart_found_again_under_new_device_name(etcd, leader, world,
                                                                cluster_name):
    async with serving_gateway(etcd, leader, world, cluster_name) as (gw, a):
        old = gw.snapshot().card(a.id).device
        ctrl = re.fullmatch(r"/dev/(nvme[0-9]+)n[0-9]+", old).group(1)
        world.sysfs.remove_controller(ctrl)         # the controller is lost with the target
        await wait_until(lambda: in_service(gw, a.id) and gw.snapshot().card(a.id).device != old,
                       what="back under a new name")
        new = gw.snapshot().card(a.id).device
        assert new != old
        id_ctrls = [c for c in world.calls() if c[0] == "id-ctrl"]
        assert len(id_ctrls) >= 2                   # identity checked again on the new name


async def test_card_answering_with_wrong_serial_is_refused(etcd, leader, world, cluster_name):
    a = make_card(1)
    serve(world, a, serial="SWAPPED0001")          # another card behind the same target
    await leader.publish([a])
    gw = gateway(config(cluster_name, etcd.endpoints, world), world)
    sub = gw.subscribe()
    await gw.start()
    try:
        await wait_until(lambda: "refused" in gw.snapshot().card(a.id).why)
        s = gw.snapshot().card(a.id)
        assert not s.in_service and "SWAPPED0001" in s.why and a.serial in s.why
        assert gw.stats().cards_refused == 1
        assert not gw.placement.dialog("conv").available
        events = []
        while (e := sub.get_nowait()) is not None:
            events.append(e)
        assert any(e.kind == "refused" and e.card_id == a.id for e in events)
    finally:
        await gw.stop()


async def test_directory_card_label_checked(etcd, leader, world, cluster_name, tmp_path):
    import shutil
    from dataclasses import replace as dc_replace

    from awide_cluster.cards.directory import write_label
    from awide_cluster.contract.registry import card_id

    d = tmp_path / "card-dir"
    d.mkdir()
    label = write_label(d, "DIRSN1", "AWIDE Dir Card")
    base = make_card(1)
    card = dc_replace(base, id=card_id("DIRSN1", "AWIDE Dir Card", label.identity),
                      serial="DIRSN1", model="AWIDE Dir Card", identity=label.identity,
                      kind="dir", target=None, path=str(d))
    await leader.publish([card])
    gw = gateway(config(cluster_name, etcd.endpoints, world), world)
    await gw.start()
    try:
        await wait_until(lambda: in_service(gw, card.id))
        assert gw.snapshot().card(card.id).device == str(d)
        shutil.rmtree(d)                               # unmounted: nothing to do I/O on
        await wait_until(lambda: not in_service(gw, card.id), what="out when gone")
        assert "no readable label" in gw.snapshot().card(card.id).why
        d.mkdir()
        write_label(d, "OTHERSN", "AWIDE Dir Card")    # other storage mounted in its place
        await wait_until(lambda: "refused" in gw.snapshot().card(card.id).why)
        assert "OTHERSN" in gw.snapshot().card(card.id).why
        shutil.rmtree(d)
        d.mkdir()
        (d / ".awide-card.json").write_text(json.dumps(dict(label.to_dict())))
        await wait_until(lambda: in_service(gw, card.id), what="the same card is back")
        assert world.calls() == []                     # no nvme for directory cards
    finally:
        await gw.stop()
