"""Stray controllers: after a restart the gateway no longer remembers which controllers it
connected, so each probe round it lets go of those sysfs shows with its host NQN, to one of
the cluster's subsystem NQNs, at no target of a card it uses (a forged or moved target, a card
forgotten while it was down). Others' controllers, other subsystems and controllers at a used
card's target stay. Fake sysfs and fake nvme-cli (every argv logged); no etcd."""

from __future__ import annotations

from pathlib import Path

from awide_cluster.contract.health import Hysteresis
from awide_cluster.nvme.cli import NvmeCli
from awide_cluster.nvme.runner import Runner
from awide_cluster.nvme.sysfs import Sysfs
from awide_gateway_cluster.connector import SWEEP_MAX, Connector, strays
from awide_gateway_cluster.view import CardPath
from awide_harness.fakes import FakeNvmeWorld
from tests.gateway.support import make_card, serve

HOSTNQN = "nqn.2024-01.io.awide:gpu1"
OTHER_HOST = "nqn.2024-01.io.awide:gpu2"
EVIL = "10.66.6.6"


def _connector(world: FakeNvmeWorld, hostnqn: str | None = HOSTNQN) -> Connector:
    return Connector(NvmeCli(Runner(env=world.env())), Sysfs(world.sysfs_root),
                     hostnqn=hostnqn, command_timeout=5.0)


def _disconnects(world: FakeNvmeWorld) -> list[str]:
    return sorted(a.removeprefix("--device=") for argv in world.calls() if "disconnect" in argv
                  for a in argv if a.startswith("--device="))


async def test_a_restarted_gateway_lets_go_of_its_stray_controllers(tmp_path: Path) -> None:
    world = FakeNvmeWorld(tmp_path / "host")
    used, forgotten = make_card(1), make_card(2)
    assert used.target is not None and forgotten.target is not None
    serve(world, used)
    fs = world.sysfs
    # what the previous run left: the used card at its target, the same subsystem at the
    # attacker's address (a forged entry it once followed), the card forgotten since
    kept = fs.add_controller(subsysnqn=used.target.subnqn, serial=used.serial,
                             model=used.model, traddr=used.target.traddr, hostnqn=HOSTNQN)
    forged = fs.add_controller(subsysnqn=used.target.subnqn, serial=used.serial,
                               model=used.model, traddr=EVIL, hostnqn=HOSTNQN)
    gone = fs.add_controller(subsysnqn=forgotten.target.subnqn, serial=forgotten.serial,
                             model=forgotten.model, traddr=forgotten.target.traddr,
                             hostnqn=HOSTNQN)
    # not this gateway's business: another host NQN, a subsystem not the cluster's, a
    # controller showing no host NQN
    others = {fs.add_controller(subsysnqn=forgotten.target.subnqn, serial=forgotten.serial,
                                traddr=EVIL, hostnqn=OTHER_HOST),
              fs.add_controller(subsysnqn="nqn.2024-01.io.other:disk", serial="X1",
                                traddr=EVIL, hostnqn=HOSTNQN),
              fs.add_controller(subsysnqn=forgotten.target.subnqn, serial="X2", traddr=EVIL)}
    subnqns = frozenset({used.target.subnqn, forgotten.target.subnqn})

    ctrls = Sysfs(world.sysfs_root).controllers()
    assert {c.name for c in strays(ctrls, hostnqn=HOSTNQN, subnqns=subnqns,
                                   cards=[used])} == {forged, gone}
    assert strays(ctrls, hostnqn=None, subnqns=subnqns, cards=[used]) == ()

    conn = _connector(world)                # a new process: nothing in ``connected``
    assert await conn.sweep([used], subnqns) == 2
    assert _disconnects(world) == sorted([forged, gone])
    assert set(fs.controller_names()) == {kept} | others
    assert await conn.sweep([used], subnqns) == 0          # nothing left to let go
    probe = await conn.probe(used, CardPath(used.id, health=Hysteresis()))
    assert probe.good and probe.verified, probe             # the used card kept its path
    assert not any("connect" in argv for argv in world.calls())

    # without a host NQN of its own the gateway cannot tell its controllers: none touched
    fs.add_controller(subsysnqn=used.target.subnqn, serial=used.serial, traddr=EVIL,
                      hostnqn=HOSTNQN)
    assert await _connector(world, hostnqn=None).sweep([used], subnqns) == 0


async def test_the_sweep_is_bounded_per_round(tmp_path: Path) -> None:
    world = FakeNvmeWorld(tmp_path / "host")
    card = make_card(1)
    assert card.target is not None
    for i in range(SWEEP_MAX + 3):
        world.sysfs.add_controller(subsysnqn=card.target.subnqn, serial=card.serial,
                                   traddr=f"10.66.6.{i + 1}", hostnqn=HOSTNQN)
    conn = _connector(world)
    subnqns = frozenset({card.target.subnqn})
    assert await conn.sweep([], subnqns) == SWEEP_MAX
    assert await conn.sweep([], subnqns) == 3
    assert world.sysfs.controller_names() == []
