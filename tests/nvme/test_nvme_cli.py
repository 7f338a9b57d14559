"""NvmeCli against the fake nvme-cli 2.3 program on PATH (awide_harness/fakes/fake_nvme.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from awide_cluster.contract.target import InvalidTarget, NvmeTarget
from awide_cluster.nvme.cli import NvmeCli
from awide_cluster.nvme.errors import (
    AlreadyConnected,
    ConnectFailed,
    DisconnectFailed,
    NvmeCommandFailed,
    NvmeParseError,
)
from awide_cluster.nvme.runner import CommandTimeout, ProgramNotFound, Runner
from awide_cluster.nvme.sysfs import Sysfs
from awide_harness.fakes import FakeNvmeWorld, pid_alive
from tests.timing import wait_until

NQN = "nqn.2024-01.io.awide:sub1"
SERIAL = "AWIDE0000SN0001"
NGUID = "0102030405060708090a0b0c0d0e0f10"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvme-cli-2.3"
TARGET = NvmeTarget("tcp", "10.200.0.11", 4420, NQN)


@pytest.fixture
def world(tmp_path):
    w = FakeNvmeWorld(tmp_path)
    w.add_target(NQN, serial=SERIAL, nguid=NGUID)
    return w


@pytest.fixture
def cli(world):
    return NvmeCli(Runner(env=world.env()), timeout=10.0)


async def test_connect_creates_controller_and_namespace(world, cli):
    device = await cli.connect(TARGET)
    assert device == "nvme0"
    (ctrl,) = Sysfs(world.sysfs_root).find_by_serial(SERIAL)
    assert ctrl.name == device and ctrl.state == "live" and ctrl.subsysnqn == NQN
    assert ctrl.namespaces[0].identity == f"nguid:{NGUID}"
    assert world.calls() == [["connect", "--transport=tcp", "--traddr=10.200.0.11",
                              "--trsvcid=4420", f"--nqn={NQN}"]]


async def test_connect_options_validated(world, cli):
    host = "nqn.2014-08.org.nvmexpress:uuid:b97306f6-0dde-4ab1-a911-14ab9f32adc8"
    await cli.connect(TARGET, host, ctrl_loss_tmo=5, reconnect_delay=1)
    assert world.calls()[-1][-3:] == [f"--hostnqn={host}", "--ctrl-loss-tmo=5",
                                      "--reconnect-delay=1"]


async def test_connect_twice_is_already_connected(world, cli):
    await cli.connect(TARGET)
    with pytest.raises(AlreadyConnected) as info:
        await cli.connect(TARGET)
    assert info.value.rc == 1 and "already connected" in str(info.value)


async def test_unreachable_target_fails(world, cli):
    world.update_target(NQN, reachable=False)
    with pytest.raises(ConnectFailed) as info:
        await cli.connect(TARGET)
    assert "could not add new controller" in info.value.detail
    assert Sysfs(world.sysfs_root).controllers() == ()


async def test_disconnect_then_reconnect_changes_device_name(world, cli):
    first = await cli.connect(TARGET)
    assert await cli.disconnect(NQN) == 1
    assert Sysfs(world.sysfs_root).controllers() == ()
    second = await cli.connect(TARGET)
    assert second != first
    assert Sysfs(world.sysfs_root).find_by_serial(SERIAL)[0].name == second


async def test_disconnect_of_nothing_is_a_failure_despite_exit_0(world, cli):
    with pytest.raises(DisconnectFailed) as info:
        await cli.disconnect(NQN)
    assert info.value.rc == 0


async def test_disconnect_that_does_nothing_is_caught(world, cli):
    await cli.connect(TARGET)
    world.fault("disconnect", "noop")
    with pytest.raises(DisconnectFailed):
        await cli.disconnect(NQN)
    assert len(Sysfs(world.sysfs_root).controllers()) == 1


async def test_id_ctrl_and_id_ns(world, cli):
    device = await cli.connect(TARGET)
    ident = await cli.id_ctrl(device)
    assert (ident.serial, ident.model, ident.firmware, ident.subnqn) == (
        SERIAL, "AWIDE Fake NVMe Ctrl", "1.0", NQN)
    ns = await cli.id_ns(f"/dev/{device}n1")
    assert ns.identity == f"nguid:{NGUID}"
    assert world.calls()[-2:] == [["id-ctrl", f"/dev/{device}", "--output-format=json"],
                                  ["id-ns", f"/dev/{device}n1", "--output-format=json"]]


async def test_id_ctrl_of_a_missing_device(world, cli):
    with pytest.raises(NvmeCommandFailed) as info:
        await cli.id_ctrl("nvme7")
    assert info.value.rc == 1 and "No such file" in info.value.detail


async def test_list_and_list_subsys(world, cli):
    assert await cli.list_subsys() == ()
    device = await cli.connect(TARGET)
    (sub,) = await cli.list_subsys()
    assert sub.nqn == NQN and sub.paths[0].name == device
    assert sub.paths[0].address.traddr == "10.200.0.11"
    (listed,) = await cli.list()
    assert listed.device_path == f"/dev/{device}n1" and listed.serial == SERIAL


async def test_swapped_card_answers_with_other_serial(world, cli):
    await cli.connect(TARGET)
    await cli.disconnect(NQN)
    world.update_target(NQN, serial="OTHERSERIAL", nguid="ff" * 16)
    device = await cli.connect(TARGET)
    assert (await cli.id_ctrl(device)).serial == "OTHERSERIAL"
    assert Sysfs(world.sysfs_root).find_by_serial(SERIAL) == ()


async def test_hanging_nvme_is_killed(world, cli):
    world.fault("connect", "hang")
    with pytest.raises(CommandTimeout):
        await cli.connect(TARGET, timeout=1.0)
    pids = world.pids()
    assert len(pids) == 2                          # the fake and the child it started
    await wait_until(lambda: not any(pid_alive(p) for p in pids), 5, "both processes gone")


async def test_fault_times_then_recovers(world, cli):
    world.fault("connect", "fail", rc=1, stderr="Failed to write to /dev/nvme-fabrics\n",
                times=1)
    with pytest.raises(ConnectFailed):
        await cli.connect(TARGET)
    assert await cli.connect(TARGET) == "nvme0"


async def test_garbage_answers_are_parse_errors(world, cli):
    world.fault("list-subsys", "output", stdout="Failed to scan topology\n")
    with pytest.raises(NvmeParseError):
        await cli.list_subsys()
    world.fault("connect", "output", stdout="connected!\n")
    with pytest.raises(NvmeParseError):
        await cli.connect(TARGET)


async def test_real_nvme_cli_failure_is_typed(world, cli):
    world.fault("list-subsys", "fail", rc=1,
                stderr="Failed to scan topology: No such file or directory\n")
    with pytest.raises(NvmeCommandFailed) as info:
        await cli.list_subsys()
    assert "scan topology" in str(info.value)


async def test_program_missing(tmp_path):
    cli = NvmeCli(Runner(env={"PATH": str(tmp_path)}))
    with pytest.raises(ProgramNotFound):
        await cli.list_subsys()


# ------------------------------------------------------------------ hostile input never runs

HOSTILE_TARGETS = [
    {"transport": "tcp", "traddr": "1.2.3.4;rm -rf /", "trsvcid": 4420, "subnqn": NQN},
    {"transport": "tcp", "traddr": "--help", "trsvcid": 4420, "subnqn": NQN},
    {"transport": "tcp", "traddr": "10.0.0.1\n", "trsvcid": 4420, "subnqn": NQN},
    {"transport": "tcp", "traddr": "10.0.0.1", "trsvcid": "--foo", "subnqn": NQN},
    {"transport": "--foo", "traddr": "10.0.0.1", "trsvcid": 4420, "subnqn": NQN},
    {"transport": "tcp", "traddr": "10.0.0.1", "trsvcid": 4420, "subnqn": "-n"},
    {"transport": "tcp", "traddr": "10.0.0.1", "trsvcid": 4420,
     "subnqn": NQN + ",hostnqn=nqn.2024-01.io.evil:x"},
    {"transport": "tcp", "traddr": "x" * 5000, "trsvcid": 4420, "subnqn": NQN},
]


@pytest.mark.parametrize("mapping", HOSTILE_TARGETS)
async def test_hostile_targets_never_reach_the_program(world, cli, mapping) -> None:
    with pytest.raises(InvalidTarget):
        await cli.connect(NvmeTarget.parse(mapping))
    with pytest.raises(TypeError):
        await cli.connect(mapping)
    assert world.calls() == []


@pytest.mark.parametrize("call", [
    lambda cli: cli.connect(TARGET, hostnqn="--foo"),
    lambda cli: cli.connect(TARGET, ctrl_loss_tmo="5;id"),
    lambda cli: cli.disconnect("nqn.x;rm -rf /"),
    lambda cli: cli.disconnect("--all"),
    lambda cli: cli.id_ctrl("nvme0; rm -rf /"),
    lambda cli: cli.id_ctrl("../../dev/sda"),
    lambda cli: cli.id_ns("nvme0"),
    lambda cli: cli.id_ns("--raw-binary"),
])
async def test_hostile_arguments_never_reach_the_program(world, cli, call):
    with pytest.raises(ValueError):
        await call(cli)
    assert world.calls() == []


# ------------------------------------------------------------------ the fake matches nvme-cli 2.3

def _keys(doc):
    if isinstance(doc, dict):
        return {k: _keys(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_keys(doc[0])] if doc else []
    return type(doc).__name__


@pytest.mark.parametrize("argv,fixture", [
    (["list-subsys", "-o", "json"], "list-subsys.json"),
    (["list", "-o", "json"], "list.json"),
    (["id-ctrl", "/dev/nvme0", "-o", "json"], "id-ctrl.json"),
    (["id-ns", "/dev/nvme0n1", "-o", "json"], "id-ns.json"),
])
async def test_fake_prints_the_fixture_shapes(world, cli, argv, fixture):
    await cli.connect(TARGET)
    done = await Runner(env=world.env()).run(["nvme", *argv], timeout=10)
    assert done.rc == 0, done.stderr
    ours = json.loads(done.stdout)
    real = json.loads((FIXTURES / fixture).read_text())
    assert _keys(ours) == _keys(real)
    if fixture in ("list-subsys.json", "list.json"):
        assert ours == real                       # same made-up device as the fixtures


async def test_fake_connect_json_output_and_short_options(world):
    done = await Runner(env=world.env()).run(
        ["nvme", "connect", "-t", "tcp", "-a", "10.200.0.11", "-s", "4420", "-n", NQN,
         "-o", "json"], timeout=10)
    assert done.rc == 0 and json.loads(done.stdout) == {"device": "nvme0"}


async def test_fake_refuses_unknown_options(world):
    done = await Runner(env=world.env()).run(["nvme", "connect", "--frobnicate"], timeout=10)
    assert done.rc == 1 and "unrecognized option" in done.stderr


async def test_discover_lists_the_published_subsystems_and_connects_nothing(world, cli):
    log = await cli.discover("tcp", "10.200.0.11", 8009)
    assert log.publishes(TARGET) and log.skipped == 1      # its own entry: not a subsystem
    assert not Sysfs(world.sysfs_root).controllers()
    argv = world.calls()[-1]
    assert argv[0] == "discover" and "--traddr=10.200.0.11" in argv
    assert "--trsvcid=8009" in argv and "--output-format=json" in argv
    world.update_target(NQN, published=False)
    assert not (await cli.discover("tcp", "10.200.0.11", 8009)).publishes(TARGET)
    with pytest.raises(NvmeCommandFailed, match="Connection refused"):
        await cli.discover("tcp", "10.200.0.99", 8009)
    with pytest.raises(InvalidTarget):
        await cli.discover("tcp", "10.200.0.11; rm -rf /", 8009)
