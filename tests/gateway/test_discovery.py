"""The NVMe-oF discovery check (``nvme.discovery``): before a connect, the gateway reads the
discovery log of the discovery controller at the card's vouched address (fake nvme-cli on
PATH) and connects only when that log publishes the card's target as is. Nothing is taken from
the log: a subsystem published at another address is never connected, and a card whose target
is not published (or whose discovery controller does not answer) stays unconnected, said in
its note."""

from __future__ import annotations

from pathlib import Path

from awide_cluster.contract.health import Hysteresis
from awide_cluster.nvme.cli import NvmeCli
from awide_cluster.nvme.runner import Runner
from awide_cluster.nvme.sysfs import Sysfs
from awide_gateway_cluster.connector import Connector, for_config
from awide_gateway_cluster.view import CardPath
from awide_harness.fakes import FakeNvmeWorld
from tests.gateway.support import make_card, serve
from tests.gateway.test_pure import cfg

HOSTNQN = "nqn.2024-01.io.awide:gpu1"


def _world(tmp_path: Path):
    world = FakeNvmeWorld(tmp_path / "host")
    card = make_card(1)
    serve(world, card)
    assert card.target is not None
    return world, card


def _connector(world: FakeNvmeWorld, port: int | None = 8009, *,
               discovery: bool = True) -> Connector:
    return Connector(NvmeCli(Runner(env=world.env())), Sysfs(world.sysfs_root),
                     hostnqn=HOSTNQN, command_timeout=5.0, discovery=discovery,
                     discovery_port=port)


def test_the_option_is_off_by_default_and_reaches_the_connector() -> None:
    assert not cfg().nvme.discovery and cfg().nvme.discovery_port is None
    on = cfg(nvme={"discovery": True, "discovery_port": 8009})
    conn = for_config(on, nvme=None, sysfs=None, read_label=None, worker=None)
    assert conn.discovery and conn.discovery_port == 8009
    assert not for_config(cfg(), nvme=None, sysfs=None, read_label=None,
                          worker=None).discovery


async def test_a_published_target_is_connected_after_the_discovery(tmp_path: Path) -> None:
    world, card = _world(tmp_path)
    probe = await _connector(world).probe(card, CardPath(card.id, health=Hysteresis()))
    assert probe.good and probe.verified, probe
    commands = [c[0] for c in world.calls()]
    assert commands.index("discover") < commands.index("connect")
    (discover,) = [c for c in world.calls() if c[0] == "discover"]
    assert card.target is not None
    assert {f"--traddr={card.target.traddr}", "--trsvcid=8009", f"--hostnqn={HOSTNQN}",
            "--output-format=json"} <= set(discover)


async def test_an_unpublished_target_is_not_connected(tmp_path: Path) -> None:
    world, card = _world(tmp_path)
    assert card.target is not None
    world.update_target(card.target.subnqn, published=False)
    # the same subsystem published elsewhere: never taken
    world.discovery_extra([{"trtype": "tcp", "adrfam": "ipv4", "subtype": "nvme subsystem",
                            "treq": "none", "portid": 2, "trsvcid": "4420",
                            "subnqn": card.target.subnqn, "traddr": "10.66.6.6"}])
    conn = _connector(world)
    probe = await conn.probe(card, CardPath(card.id, health=Hysteresis()))
    assert not probe.device and "not published by the discovery controller" in probe.note
    assert not [c for c in world.calls() if c[0] == "connect"]
    # published again: connected at the next probe
    world.update_target(card.target.subnqn, published=True)
    probe = await conn.probe(card, CardPath(card.id, health=Hysteresis()))
    assert probe.good and probe.verified, probe
    (connect,) = [c for c in world.calls() if c[0] == "connect"]
    assert f"--traddr={card.target.traddr}" in connect


async def test_no_discovery_controller_no_connect_and_without_the_option_none_asked(
        tmp_path: Path) -> None:
    world, card = _world(tmp_path)
    probe = await _connector(world, port=4999).probe(card, CardPath(card.id,
                                                                    health=Hysteresis()))
    assert "discovery at tcp://" in probe.note and "failed" in probe.note, probe
    assert [c[0] for c in world.calls()] == ["discover"]
    probe = await _connector(world, discovery=False).probe(card, CardPath(card.id,
                                                                         health=Hysteresis()))
    assert probe.good and [c[0] for c in world.calls()][1:] == ["connect", "id-ctrl"]


async def test_without_a_port_the_cards_own_port_is_asked(tmp_path: Path) -> None:
    world, card = _world(tmp_path)
    assert card.target is not None
    probe = await _connector(world, port=None).probe(card, CardPath(card.id,
                                                                    health=Hysteresis()))
    assert probe.good, probe
    (discover,) = [c for c in world.calls() if c[0] == "discover"]
    assert f"--trsvcid={card.target.trsvcid}" in discover
