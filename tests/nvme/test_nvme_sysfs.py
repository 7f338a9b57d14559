"""Sysfs reader over fake sysfs trees built by awide_harness.fakes.FakeSysfs."""

from __future__ import annotations

import os

import pytest

from awide_cluster.nvme.sysfs import READ_CAP, Sysfs
from awide_harness.fakes import FakeNs, FakeSysfs

NQN = "nqn.2024-01.io.awide:sub1"
NGUID = "0102030405060708090a0b0c0d0e0f10"


@pytest.fixture
def fs(tmp_path):
    return FakeSysfs(tmp_path / "sys")


def test_controller_attributes_and_namespace(fs):
    name = fs.add_controller(subsysnqn=NQN, serial="AWIDE0000SN0001",
                             namespaces=[FakeNs(nsid=1, nguid=NGUID)])
    (ctrl,) = Sysfs(fs.root).controllers()
    assert ctrl.name == name == "nvme0"
    assert ctrl.transport == "tcp"
    assert (ctrl.address.traddr, ctrl.address.trsvcid) == ("10.200.0.11", "4420")
    assert ctrl.subsysnqn == NQN
    assert (ctrl.serial, ctrl.model, ctrl.firmware_rev) == (
        "AWIDE0000SN0001", "AWIDE Fake NVMe Ctrl", "1.0")
    assert ctrl.state == "live" and ctrl.cntlid == 1
    (ns,) = ctrl.namespaces
    assert (ns.name, ns.nsid, ns.device) == ("nvme0n1", 1, "nvme0n1")
    assert ns.nguid == "01020304-0506-0708-090a-0b0c0d0e0f10"     # kernel's %pU form
    assert ns.identity == f"nguid:{NGUID}"
    assert ctrl.namespace() is ns and ctrl.namespace(1) is ns and ctrl.namespace(2) is None


def test_serial_padding_is_stripped(fs):
    fs.add_controller(subsysnqn=NQN, serial="SN1        ")
    assert Sysfs(fs.root).controllers()[0].serial == "SN1"
    assert len(Sysfs(fs.root).find_by_serial("SN1")) == 1


def test_find_by_serial_and_order(fs):
    for _ in range(11):
        fs.add_controller(subsysnqn=NQN, serial="OTHER")
    a = fs.add_controller(subsysnqn=NQN, serial="MINE", state="connecting")
    b = fs.add_controller(subsysnqn=NQN, serial="MINE")
    sysfs = Sysfs(fs.root)
    assert [c.name for c in sysfs.controllers()][:3] == ["nvme0", "nvme1", "nvme2"]
    assert [c.name for c in sysfs.controllers()][-2:] == ["nvme11", "nvme12"]
    assert [c.name for c in sysfs.find_by_serial("MINE")] == [a, b]
    assert sysfs.find_by_serial("NOPE") == ()
    assert sysfs.find_by_serial("") == ()


def test_removed_controller_is_gone_and_names_are_not_reused(fs):
    a = fs.add_controller(subsysnqn=NQN, serial="SN1")
    fs.remove_controller(a)
    assert Sysfs(fs.root).controllers() == ()
    assert Sysfs(fs.root).controller(a) is None
    b = fs.add_controller(subsysnqn=NQN, serial="SN1")
    assert b != a


def test_state_change_is_seen(fs):
    name = fs.add_controller(subsysnqn=NQN, serial="SN1")
    fs.set_state(name, "resetting")
    assert Sysfs(fs.root).controller(name).state == "resetting"


def test_missing_attributes_read_as_empty(fs):
    name = fs.add_controller(subsysnqn=NQN, serial="SN1")
    for attr in ("serial", "model", "state", "cntlid", "address"):
        (fs.class_dir / name / attr).unlink()
    ctrl = Sysfs(fs.root).controller(name)
    assert (ctrl.serial, ctrl.model, ctrl.state, ctrl.cntlid) == ("", "", "", None)
    assert Sysfs(fs.root).find_by_serial("SN1") == ()


def test_an_attribute_that_is_not_a_file_reads_as_missing(fs):
    """A directory (or anything unreadable) where an attribute should be: read as missing,
    the controller still found, no descriptor left open."""
    name = fs.add_controller(subsysnqn=NQN, serial="SN1")
    (fs.class_dir / name / "state").unlink()
    (fs.class_dir / name / "state").mkdir()
    before = len(os.listdir("/proc/self/fd"))
    ctrl = Sysfs(fs.root).controller(name)
    assert ctrl is not None and ctrl.state == "" and ctrl.serial == "SN1"
    assert len(os.listdir("/proc/self/fd")) == before


def test_junk_attributes_do_not_break_discovery(fs):
    name = fs.add_controller(subsysnqn=NQN, serial="SN1")
    fs.set_attr(name, "address", "traddr=1,traddr=2")
    fs.set_attr(name, "cntlid", "junk")
    (fs.class_dir / name / "serial").write_bytes(b"\xff\xfe" * 10)
    ctrl = Sysfs(fs.root).controller(name)
    assert ctrl.address.traddr is None and ctrl.address.raw == "traddr=1,traddr=2"
    assert ctrl.cntlid is None and ctrl.serial == ""


def test_reads_are_capped(fs):
    name = fs.add_controller(subsysnqn=NQN, serial="SN1")
    (fs.class_dir / name / "model").write_text("M" * (1 << 20))
    (fs.class_dir / name / "subsysnqn").write_text("n" * (1 << 20))
    ctrl = Sysfs(fs.root).controller(name)
    assert ctrl.model == ""                         # refused (too long), not a 1 MiB string
    assert len(ctrl.subsysnqn) == READ_CAP


def test_other_entries_ignored(fs):
    fs.add_controller(subsysnqn=NQN, serial="SN1")
    (fs.class_dir / "nvme-fabrics").mkdir()
    (fs.class_dir / "nvme0" / "nvme0n1" / "queue").mkdir()
    (fs.class_dir / "nvme0" / "power").mkdir()
    sysfs = Sysfs(fs.root)
    assert [c.name for c in sysfs.controllers()] == ["nvme0"]
    assert [n.name for n in sysfs.controllers()[0].namespaces] == ["nvme0n1"]
    assert sysfs.controller("../../etc") is None


def test_no_class_dir_means_no_controllers(tmp_path):
    assert Sysfs(tmp_path / "nothing").controllers() == ()


def test_multipath_path_device_maps_to_head(fs):
    name = fs.add_controller(subsysnqn=NQN, serial="SN1", multipath=True,
                             namespaces=[FakeNs(nsid=1, nguid=NGUID)])
    (ns,) = Sysfs(fs.root).controller(name).namespaces
    assert ns.name == "nvme0c0n1" and ns.device == "nvme0n1"
    assert ns.identity == f"nguid:{NGUID}"


@pytest.mark.parametrize("ns,identity", [
    (FakeNs(nsid=1, nguid=NGUID), f"nguid:{NGUID}"),
    (FakeNs(nsid=1, uuid="6f1a5b8e-1b7a-4a5e-8f43-2b2b0b8d7b11"),
     "uuid:6f1a5b8e-1b7a-4a5e-8f43-2b2b0b8d7b11"),
    (FakeNs(nsid=1, eui64="00a0b0c0d0e0f001"), "eui64:00a0b0c0d0e0f001"),
    (FakeNs(nsid=1, wwid=f"eui.{NGUID}"), f"nguid:{NGUID}"),
    (FakeNs(nsid=1), None),                       # wwid nvme.<vid>-… is not on-card identity
    (FakeNs(nsid=1, nguid="0" * 32, eui64="0" * 16), None),
])
def test_namespace_identity_sources(fs, ns, identity):
    name = fs.add_controller(subsysnqn=NQN, serial="SN1", namespaces=[ns])
    assert Sysfs(fs.root).controller(name).namespaces[0].identity == identity


def test_pcie_controller(fs):
    name = fs.add_controller(subsysnqn=NQN, serial="SN1", transport="pcie",
                             traddr="0000:01:00.0")
    ctrl = Sysfs(fs.root).controller(name)
    assert ctrl.transport == "pcie" and ctrl.address.raw == "0000:01:00.0"
    assert ctrl.address.traddr is None


def test_symlinked_controllers_like_the_kernel(fs, tmp_path):
    # /sys/class/nvme/nvmeN is a symlink into /sys/devices/... on a real kernel
    name = fs.add_controller(subsysnqn=NQN, serial="SN1")
    real = tmp_path / "sys" / "devices" / "virtual" / "nvme-fabrics" / "ctl" / name
    real.parent.mkdir(parents=True)
    (fs.class_dir / name).rename(real)
    (fs.class_dir / name).symlink_to(real)
    assert Sysfs(fs.root).find_by_serial("SN1")[0].name == name
