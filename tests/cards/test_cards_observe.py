"""observe_card(): discovery + probes of one card, concurrently and bounded."""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import socket
import time

import pytest

from awide_cluster.cards.directory import write_label
from awide_cluster.cards.model import LocalCard, ProbeResult, summarize
from awide_cluster.cards.nvme import choose
from awide_cluster.cards.observe import observe_card, observe_cards
from awide_cluster.cards.spec import CardSpec
from awide_cluster.nvme.runner import Runner
from awide_cluster.nvme.sysfs import Sysfs
from awide_harness.fakes import CountedSysfs, FakeNs, FakeNvmeWorld, pid_alive
from tests.timing import bound, wait_until

NQN = "nqn.2024-01.io.awide:card0"
SERIAL = "AWIDE0000SN0001"
NGUID = "0102030405060708090a0b0c0d0e0f10"
IDENTITY = f"nguid:{NGUID}"
clock = time.monotonic

STORE_CHECK = ("import sys, time\n"
               "if sys.argv[1] == 'hang': time.sleep(3600)\n"
               "sys.exit(int(sys.argv[1]))\n")


@pytest.fixture
def world(tmp_path):
    w = FakeNvmeWorld(tmp_path)
    w.install_program("store-check", STORE_CHECK)
    return w


@pytest.fixture
def runner(world):
    return Runner(env=world.env())


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nvme_spec(port: int, **over) -> CardSpec:
    data = {"name": "card0", "kind": "nvme", "serial": SERIAL,
            "target": {"transport": "tcp", "traddr": "127.0.0.1", "trsvcid": port,
                       "subnqn": NQN},
            "store": {"command": ["store-check", "0"]}, "probe_timeout": 2.0, **over}
    return CardSpec.model_validate(data)


def local_card(world, **over) -> str:
    """A local PCIe card in the fake sysfs."""
    args = {"subsysnqn": NQN, "serial": SERIAL, "transport": "pcie", "traddr": "0000:01:00.0",
            "namespaces": [FakeNs(nsid=1, nguid=NGUID)], **over}
    return world.sysfs.add_controller(**args)


def names(obs) -> list[str]:
    return [p.probe for p in obs.probes]


# ------------------------------------------------------------------ nvme

async def test_healthy_nvme_card(world, runner, listener):
    ctrl = local_card(world)
    obs = await observe_card(nvme_spec(listener), runner, Sysfs(world.sysfs_root), None, clock)
    assert obs.healthy and obs.reason == "ok", obs
    assert names(obs) == ["discovery", "device", "identity", "store", "listener"]
    assert obs.card == LocalCard(name="card0", kind="nvme", serial=SERIAL,
                                 model="AWIDE Fake NVMe Ctrl", identity=IDENTITY,
                                 device=f"{ctrl}n1", controller_state="live",
                                 target=nvme_spec(listener).target)
    assert obs.spec_name == "card0"
    assert world.calls() == []                     # sysfs had the identity: nvme not run
    again = await observe_card(nvme_spec(listener), runner, Sysfs(world.sysfs_root), IDENTITY,
                               clock)
    assert again.healthy and "unchanged" in again.probe("identity").reason


async def test_card_not_found(world, runner, listener):
    local_card(world, serial="SOMEONE-ELSE")
    obs = await observe_card(nvme_spec(listener), runner, Sysfs(world.sysfs_root), IDENTITY, clock)
    assert obs.card is None and not obs.healthy
    assert obs.reason.startswith("card not found") and SERIAL in obs.reason
    assert names(obs) == ["discovery", "store", "listener"]   # the others still report


async def test_controller_not_live(world, runner, listener):
    ctrl = local_card(world, state="resetting")
    obs = await observe_card(nvme_spec(listener), runner, Sysfs(world.sysfs_root), IDENTITY, clock)
    assert not obs.healthy and obs.card.controller_state == "resetting"
    assert obs.probe("device").ok is False
    assert "resetting" in obs.reason and ctrl in obs.reason


async def test_card_back_under_a_new_name_same_identity(world, runner, listener):
    first = local_card(world)
    world.sysfs.remove_controller(first)
    second = local_card(world)
    obs = await observe_card(nvme_spec(listener), runner, Sysfs(world.sysfs_root), IDENTITY, clock)
    assert obs.healthy and obs.card.device == f"{second}n1" != f"{first}n1"


async def test_swapped_card_with_same_serial_other_identity(world, runner, listener):
    local_card(world, namespaces=[FakeNs(nsid=1, nguid="ff" * 16)])
    obs = await observe_card(nvme_spec(listener), runner, Sysfs(world.sysfs_root), IDENTITY, clock)
    assert not obs.healthy
    assert obs.probe("identity").ok is False
    assert "identity changed" in obs.reason and IDENTITY in obs.reason


async def test_identity_from_nvme_id_ns_when_sysfs_has_none(world, runner, listener):
    world.add_target(NQN, serial=SERIAL, nguid=NGUID)
    ctrl = local_card(world, namespaces=[FakeNs(nsid=1)])
    obs = await observe_card(nvme_spec(listener), runner, Sysfs(world.sysfs_root), None, clock)
    assert obs.healthy, obs.reason
    assert obs.card.identity == IDENTITY
    assert world.calls() == [["id-ns", f"/dev/{ctrl}n1", "--output-format=json"]]


async def test_identity_unreadable_is_unhealthy(world, runner, listener):
    local_card(world, namespaces=[FakeNs(nsid=1)])
    world.fault("id-ns", "fail", rc=1, stderr="NVMe status: INVALID_NS\n")
    obs = await observe_card(nvme_spec(listener), runner, Sysfs(world.sysfs_root), None, clock)
    assert not obs.healthy and obs.card is not None and obs.card.identity is None
    assert "no on-card identity" in obs.reason and "id-ns" in obs.reason


async def test_namespace_missing(world, runner, listener):
    ctrl = local_card(world, namespaces=[])
    obs = await observe_card(nvme_spec(listener), runner, Sysfs(world.sysfs_root), None, clock)
    assert not obs.healthy and f"{ctrl} shows no namespace" in obs.reason


async def test_configured_nsid(world, runner, listener):
    ctrl = local_card(world, namespaces=[FakeNs(nsid=1, nguid=NGUID),
                                         FakeNs(nsid=2, nguid="22" * 16)])
    obs = await observe_card(nvme_spec(listener, nsid=2), runner, Sysfs(world.sysfs_root), None,
                        clock)
    assert obs.healthy and obs.card.device == f"{ctrl}n2"
    assert obs.card.identity == "nguid:" + "22" * 16


async def test_store_dead_and_listener_gone(world, runner):
    local_card(world)
    spec = nvme_spec(closed_port(), store={"command": ["store-check", "1"]})
    obs = await observe_card(spec, runner, Sysfs(world.sysfs_root), IDENTITY, clock)
    assert not obs.healthy
    assert obs.probe("store").ok is False and obs.probe("listener").ok is False
    assert obs.reason == obs.probe("store").reason            # first failing in order
    assert "exited 1" in obs.reason
    assert "refused" in obs.probe("listener").reason


async def test_everything_runs_concurrently_within_the_bound(world, runner):
    """Discovery needs nvme id-ns (hangs), the store hangs, the listener is unroutable:
    the observation still comes back after about one bound, not three."""
    local_card(world, namespaces=[FakeNs(nsid=1)])
    world.fault("id-ns", "hang")
    spec = CardSpec.model_validate({
        "name": "card0", "kind": "nvme", "serial": SERIAL, "probe_timeout": 1.0,
        "target": {"transport": "tcp", "traddr": "192.0.2.1", "trsvcid": 4420, "subnqn": NQN},
        "store": {"command": ["store-check", "hang"]}})
    start = time.monotonic()
    obs = await observe_card(spec, runner, Sysfs(world.sysfs_root), IDENTITY, clock)
    took = time.monotonic() - start
    assert took < 2.5, took                                   # generous; 3 bounds would be 3 s
    assert not obs.healthy
    assert obs.probe("store").ok is False and "1 s" in obs.probe("store").reason
    assert obs.probe("discovery").ok is True
    assert obs.probe("identity").ok is False                  # nvme id-ns hung: killed
    assert "id-ns" in obs.probe("identity").reason
    assert "no answer" in obs.probe("identity").reason
    assert world.pids()
    await wait_until(lambda: not any(pid_alive(p) for p in world.pids()), 5,
                     "no process outlives it")


# ------------------------------------------------------------------ dir

def dir_spec(path, **over) -> CardSpec:
    return CardSpec.model_validate({"name": "dev0", "kind": "dir", "path": str(path),
                                    "probe_timeout": 2.0, **over})


async def test_healthy_dir_card(tmp_path, runner):
    card_dir = tmp_path / "dev0"
    card_dir.mkdir()
    label = write_label(card_dir, "DIR-0001", "awide dir card")
    obs = await observe_card(dir_spec(card_dir), runner, Sysfs(tmp_path / "sys"), None, clock)
    assert obs.healthy, obs.reason
    assert names(obs) == ["discovery", "identity", "writable"]
    assert obs.card.identity == label.identity and obs.card.serial == "DIR-0001"
    assert obs.card.device == str(card_dir)


async def test_dir_swapped_for_other_storage(tmp_path, runner):
    card_dir = tmp_path / "dev0"
    card_dir.mkdir()
    first = write_label(card_dir, "DIR-0001", "m")
    shutil.rmtree(card_dir)
    card_dir.mkdir()
    obs = await observe_card(dir_spec(card_dir), runner, Sysfs(tmp_path / "sys"), first.identity,
                        clock)
    assert obs.card is None and "card not found" in obs.reason and "no label" in obs.reason
    write_label(card_dir, "DIR-0001", "m")                     # relabelled: another card
    obs = await observe_card(dir_spec(card_dir), runner, Sysfs(tmp_path / "sys"), first.identity,
                        clock)
    assert not obs.healthy and "identity changed" in obs.reason


async def test_dir_missing(tmp_path, runner):
    obs = await observe_card(dir_spec(tmp_path / "absent"), runner, Sysfs(tmp_path / "sys"), None,
                        clock)
    assert obs.card is None and not obs.healthy
    assert "does not exist" in obs.reason
    assert obs.probe("writable").ok is False


async def test_dir_with_store_probe(tmp_path, world, runner):
    card_dir = tmp_path / "dev0"
    card_dir.mkdir()
    write_label(card_dir, "DIR-0001", "m")
    spec = dir_spec(card_dir, store={"command": ["store-check", "3"]})
    obs = await observe_card(spec, runner, Sysfs(tmp_path / "sys"), None, clock)
    assert not obs.healthy and "exited 3" in obs.reason


# ------------------------------------------------------------------ a round of cards

def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def full_port():
    """A listener whose queue is full: a connect to it stays under way (its SYN dropped)."""
    with socket.socket() as s, \
            socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK) as filler:
        s.bind(("127.0.0.1", 0))
        s.listen(0)
        filler.connect_ex(s.getsockname())
        yield s.getsockname()[1]


def labelled(tmp_path, name: str, **over) -> CardSpec:
    d = tmp_path / name
    d.mkdir()
    write_label(d, f"SN-{name}", "m")
    return dir_spec(d, name=name, **over)


async def test_a_round_reads_each_card_s_connect_and_bounds_one_under_way(tmp_path, runner,
                                                                          listener, full_port):
    """Three cards in one round: a store that accepts, one that refuses, one whose connect is
    still under way at the card's deadline (its own timeout words, within its bound, its
    socket closed); the others are not held up by it and each reports its own."""
    refused = closed_port()
    cards = [labelled(tmp_path, "up", store={"tcp": f"127.0.0.1:{listener}"}),
             labelled(tmp_path, "refused", store={"tcp": f"127.0.0.1:{refused}"}),
             labelled(tmp_path, "stuck", probe_timeout=0.3,
                      store={"tcp": f"127.0.0.1:{full_port}"})]
    before = _open_fds()
    start = time.monotonic()
    up, down, stuck = await observe_cards([(c, None) for c in cards], runner,
                                          Sysfs(tmp_path / "sys"), clock)
    assert time.monotonic() - start < bound(0.3 + 0.5)
    assert up.healthy and up.probe("store").reason == \
        f"store 127.0.0.1:{listener} accepts connections"
    assert names(up) == ["discovery", "identity", "writable", "store"]
    assert not down.healthy and down.reason == \
        f"store 127.0.0.1:{refused}: {os.strerror(errno.ECONNREFUSED)}"
    assert stuck.card is not None and stuck.probe("writable").ok
    assert not stuck.healthy and stuck.reason == "store: no answer within 0.3 s"
    assert stuck.probe("store").elapsed >= 0.29
    assert _open_fds() <= before


async def test_a_round_given_up_by_its_caller_leaves_no_socket_open(tmp_path, runner,
                                                                      full_port):
    card = labelled(tmp_path, "stuck", probe_timeout=5.0,
                    store={"tcp": f"127.0.0.1:{full_port}"})
    before = _open_fds()
    task = asyncio.ensure_future(observe_cards([(card, None)], runner, Sysfs(tmp_path / "sys"),
                                               clock))
    await wait_until(lambda: _open_fds() > before, 5, "the round's connect started")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # the socket is closed by the cancellation; the worker's label read and write end alone
    await wait_until(lambda: _open_fds() <= before, 5, "nothing of the round left open")


# ------------------------------------------------------------------ pure parts

def test_summarize_orders_and_picks_first_failure():
    card = LocalCard("c", "dir", "S", "M", "label:x", "/d", None, None)
    probes = [ProbeResult("listener", False, "listener down", 0.1),
              ProbeResult("store", False, "store down", 0.1),
              ProbeResult("discovery", True, "found", 0.0)]
    obs = summarize("c", card, probes)
    assert [p.probe for p in obs.probes] == ["discovery", "store", "listener"]
    assert obs.reason == "store down" and not obs.healthy
    ok = summarize("c", card, [ProbeResult("discovery", True, "found", 0.0)])
    assert ok.healthy and ok.reason == "ok"
    gone = summarize("c", None, [])
    assert not gone.healthy and gone.reason == "card not found: c"
    assert obs.to_dict()["probes"][0]["probe"] == "discovery"


def test_choose_prefers_namespace_then_live(tmp_path):
    fs = FakeNvmeWorld(tmp_path).sysfs
    fs.add_controller(subsysnqn=NQN, serial=SERIAL, state="connecting")
    fs.add_controller(subsysnqn=NQN, serial=SERIAL, namespaces=[])
    live = fs.add_controller(subsysnqn=NQN, serial=SERIAL)
    ctrls = Sysfs(fs.root).find_by_serial(SERIAL)
    ctrl, ns = choose(ctrls, None)
    assert ctrl.name == live and ns.nsid == 1
    assert choose((), None) is None


async def test_the_nvme_cards_of_a_round_share_one_read_of_sysfs(world, runner, listener):
    """Each NVMe card is found by its serial among every controller sysfs shows: a round of
    four reads the tree once (before: once per card), and each finds its own."""
    specs = []
    for n in range(4):
        serial = f"AWIDE0000SN010{n}"
        world.sysfs.add_controller(subsysnqn=f"{NQN}{n}", serial=serial, transport="pcie",
                                   traddr=f"0000:0{n + 1}:00.0",
                                   namespaces=[FakeNs(nsid=1, nguid=f"{n:02d}" + NGUID[2:])])
        specs.append(nvme_spec(listener, name=f"card{n}", serial=serial))
    sysfs = CountedSysfs(world.sysfs_root)
    obs = await observe_cards([(s, None) for s in specs], runner, sysfs, clock)
    assert [o.card.serial for o in obs] == [s.serial for s in specs]
    assert all(o.healthy for o in obs), [o.reason for o in obs]
    assert sysfs.scans == 1
    again = await observe_cards([(s, o.card.identity) for s, o in zip(specs, obs, strict=True)],
                                runner, sysfs, clock)
    assert all(o.healthy for o in again) and sysfs.scans == 2    # the next round reads again
