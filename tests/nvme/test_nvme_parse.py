"""Parsers over the real nvme-cli 2.3 output (tests/fixtures/nvme-cli-2.3) and corruptions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from awide_cluster.nvme.errors import NvmeParseError
from awide_cluster.nvme.parse import (
    Address,
    namespace_identity,
    parse_address,
    parse_connect,
    parse_disconnect,
    parse_id_ctrl,
    parse_id_ns,
    parse_list,
    parse_list_subsys,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvme-cli-2.3"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def fixture_doc(name: str):
    return json.loads(fixture(name))


# ------------------------------------------------------------------ real output

def test_list_fixture():
    (ns,) = parse_list(fixture("list.json"))
    assert ns.device_path == "/dev/nvme0n1"
    assert ns.nsid == 1
    assert ns.serial == "AWIDE0000SN0001"
    assert ns.model == "AWIDE Fake NVMe Ctrl"
    assert ns.firmware == "1.0"
    assert (ns.used_bytes, ns.physical_size, ns.sector_size) == (1073741824, 1073741824, 512)


@pytest.mark.parametrize("name", ["list-subsys.json", "list-subsys-v.json"])
def test_list_subsys_fixture(name):
    (sub,) = parse_list_subsys(fixture(name))
    assert sub.name == "nvme-subsys0"
    assert sub.nqn == "nqn.2024-01.io.awide:sub1"
    assert sub.host_nqn == "nqn.2014-08.org.nvmexpress:uuid:b97306f6-0dde-4ab1-a911-14ab9f32adc8"
    (path,) = sub.paths
    assert path.name == "nvme0" and path.transport == "tcp" and path.state == "live"
    assert path.address == Address(raw="traddr=10.200.0.11,trsvcid=4420,src_addr=10.200.0.1",
                                   traddr="10.200.0.11", trsvcid="4420", src_addr="10.200.0.1")


def test_id_ctrl_fixture_strips_padding():
    raw = fixture_doc("id-ctrl.json")
    assert raw["sn"].endswith(" ") and raw["mn"].endswith(" ") and raw["fr"].endswith(" ")
    ident = parse_id_ctrl(fixture("id-ctrl.json"))
    assert ident.serial == "AWIDE0000SN0001"
    assert ident.model == "AWIDE Fake NVMe Ctrl"
    assert ident.firmware == "1.0"
    assert ident.subnqn == "nqn.2024-01.io.awide:sub1"
    assert ident.cntlid == 1


def test_id_ns_fixture():
    ident = parse_id_ns(fixture("id-ns.json"))
    assert ident.nguid == "0102030405060708090a0b0c0d0e0f10"
    assert ident.eui64 is None                     # all zero means: not provided
    assert ident.nsze == 2097152
    assert ident.identity == "nguid:0102030405060708090a0b0c0d0e0f10"


# ------------------------------------------------------------------ corruptions

def _corrupt(name: str, edit) -> str:
    doc = fixture_doc(name)
    edit(doc)
    return json.dumps(doc)


@pytest.mark.parametrize("edit,field", [
    (lambda d: d["Devices"][0].pop("SerialNumber"), "Devices[0].SerialNumber"),
    (lambda d: d["Devices"][0].update(SerialNumber=7), "Devices[0].SerialNumber"),
    (lambda d: d["Devices"][0].update(SerialNumber="S" * 30), "Devices[0].SerialNumber"),
    (lambda d: d["Devices"][0].update(NameSpace="1"), "Devices[0].NameSpace"),
    (lambda d: d["Devices"][0].update(NameSpace=True), "Devices[0].NameSpace"),
    (lambda d: d["Devices"][0].update(DevicePath="/dev/sda"), "Devices[0].DevicePath"),
    (lambda d: d["Devices"][0].update(DevicePath="nvme0n1"), "Devices[0].DevicePath"),
    (lambda d: d.pop("Devices"), "Devices"),
    (lambda d: d.update(Devices={}), "Devices"),
])
def test_list_corrupted(edit, field):
    with pytest.raises(NvmeParseError) as info:
        parse_list(_corrupt("list.json", edit))
    assert info.value.command == "list" and info.value.field == field
    assert field in str(info.value)


@pytest.mark.parametrize("edit,field", [
    (lambda d: d[0]["Subsystems"][0].pop("NQN"), "[0].Subsystems[0].NQN"),
    (lambda d: d[0]["Subsystems"][0]["Paths"][0].pop("Address"),
     "[0].Subsystems[0].Paths[0].Address"),
    (lambda d: d[0]["Subsystems"][0]["Paths"][0].update(Address="traddr=1.2.3.4,junk"),
     "Address"),
    (lambda d: d[0]["Subsystems"][0]["Paths"][0].update(Address="trsvcid=4420,x=1"), "Address"),
    (lambda d: d[0]["Subsystems"][0]["Paths"][0].update(Name="nvme0; rm"),
     "[0].Subsystems[0].Paths[0].Name"),
    (lambda d: d[0]["Subsystems"][0].update(Paths="nvme0"), "[0].Subsystems[0].Paths"),
    (lambda d: d[0].update(Subsystems=None), "[0].Subsystems"),
    (lambda d: d.append("host"), "[1]"),
])
def test_list_subsys_corrupted(edit, field):
    with pytest.raises(NvmeParseError) as info:
        parse_list_subsys(_corrupt("list-subsys.json", edit))
    assert info.value.command == "list-subsys" and info.value.field == field


def test_list_subsys_host_without_subsystems_is_empty():
    assert parse_list_subsys('[{"HostNQN": "nqn.2014-08.org.nvmexpress:uuid:x"}]') == ()
    assert parse_list_subsys("[]") == ()


@pytest.mark.parametrize("edit,field", [
    (lambda d: d.pop("sn"), "sn"), (lambda d: d.update(sn=""), "sn"),
    (lambda d: d.update(sn="  \n "), "sn"), (lambda d: d.update(mn=None), "mn"),
    (lambda d: d.update(mn="M" * 41), "mn"), (lambda d: d.update(fr="1.0\x01"), "fr"),
    (lambda d: d.update(cntlid="1"), "cntlid"),
])
def test_id_ctrl_corrupted(edit, field):
    with pytest.raises(NvmeParseError) as info:
        parse_id_ctrl(_corrupt("id-ctrl.json", edit))
    assert info.value.command == "id-ctrl" and info.value.field == field


@pytest.mark.parametrize("edit,field", [
    (lambda d: d.pop("nguid"), "nguid"), (lambda d: d.update(nguid="0102"), "nguid"),
    (lambda d: d.update(nguid="zz" * 16), "nguid"), (lambda d: d.update(eui64=0), "eui64"),
    (lambda d: d.pop("nsze"), "nsze"),
])
def test_id_ns_corrupted(edit, field):
    with pytest.raises(NvmeParseError) as info:
        parse_id_ns(_corrupt("id-ns.json", edit))
    assert info.value.command == "id-ns" and info.value.field == field


def test_id_ns_all_zero_has_no_identity():
    text = _corrupt("id-ns.json", lambda d: d.update(nguid="0" * 32, eui64="0" * 16))
    assert parse_id_ns(text).identity is None
    text = _corrupt("id-ns.json", lambda d: d.update(nguid="0" * 32, eui64="00A0B0C0D0E0F001"))
    assert parse_id_ns(text).identity == "eui64:00a0b0c0d0e0f001"


@pytest.mark.parametrize("parser,command", [
    (parse_list, "list"), (parse_list_subsys, "list-subsys"), (parse_id_ctrl, "id-ctrl"),
    (parse_id_ns, "id-ns"),
])
@pytest.mark.parametrize("junk", ["", "   \n", "{", "Failed to scan topology: No such file",
                                  "[1, 2", "NaN", '{"a": NaN}', "[" * 100_000, "null", "42"])
def test_junk_output(parser, command, junk):
    with pytest.raises(NvmeParseError) as info:
        parser(junk)
    assert info.value.command == command


def test_plain_text_fixtures_are_not_json():
    with pytest.raises(NvmeParseError):
        parse_list(fixture("list.txt"))
    with pytest.raises(NvmeParseError):
        parse_id_ctrl(fixture("id-ctrl.txt"))


# ------------------------------------------------------------------ address, connect, disconnect

def test_parse_address_forms():
    assert parse_address("traddr=10.0.0.1,trsvcid=4420\n") == Address(
        raw="traddr=10.0.0.1,trsvcid=4420", traddr="10.0.0.1", trsvcid="4420")
    a = parse_address("traddr=fd00::1,trsvcid=4420,host_traddr=fd00::2,src_addr=fd00::2")
    assert (a.traddr, a.host_traddr, a.src_addr) == ("fd00::1", "fd00::2", "fd00::2")
    assert parse_address("0000:01:00.0") == Address(raw="0000:01:00.0")     # PCIe
    for bad in ("traddr=1,traddr=2", "trsvcid=1", "traddr=1,,", "=1,traddr=2", "x" * 600):
        with pytest.raises(NvmeParseError):
            parse_address(bad)


@pytest.mark.parametrize("text,device", [
    ("device: nvme0\n", "nvme0"), ("device: nvme12", "nvme12"),
    ('{\n  "device":"nvme3"\n}\n', "nvme3"),
    ("traddr=x is already ...\ndevice: nvme4\n", "nvme4"),
])
def test_connect_output(text, device):
    assert parse_connect(text) == device


@pytest.mark.parametrize("text", ["", "ok\n", "device: sda", "device: nvme0n1",
                                  "device: nvme0;rm", '{"device": 3}', '{"dev": "nvme0"}',
                                  "device: ../nvme0"])
def test_connect_output_junk(text):
    with pytest.raises(NvmeParseError) as info:
        parse_connect(text)
    assert info.value.command == "connect"


def test_disconnect_output():
    assert parse_disconnect("NQN:nqn.2024-01.io.awide:sub1 disconnected 1 controller(s)\n") == 1
    assert parse_disconnect("NQN:x disconnected 0 controller(s)\n") == 0
    with pytest.raises(NvmeParseError):
        parse_disconnect("")
    with pytest.raises(NvmeParseError):
        parse_disconnect("Failed to disconnect")


def test_namespace_identity_sources_agree():
    hex32 = "0102030405060708090a0b0c0d0e0f10"
    sysfs_form = "01020304-0506-0708-090a-0b0c0d0e0f10"
    assert namespace_identity(nguid=hex32) == namespace_identity(nguid=sysfs_form)
    assert namespace_identity(nguid="0" * 32, uuid=sysfs_form) == f"uuid:{sysfs_form}"
    assert namespace_identity(nguid=hex32, uuid=sysfs_form) == f"nguid:{hex32}"
    assert namespace_identity() is None
    assert namespace_identity(nguid="junk", eui64="junk") is None


def _discovery(*records: object, genctr: int = 1) -> str:
    return json.dumps({"genctr": genctr, "records": list(records)})


def test_discover_keeps_only_valid_subsystem_entries():
    from awide_cluster.contract.target import NvmeTarget
    from awide_cluster.nvme.parse import DISCOVERY_RECORDS_MAX, parse_discover
    good = {"trtype": "tcp", "adrfam": "ipv4", "subtype": "nvme subsystem", "treq": "none",
            "portid": 1, "trsvcid": "4420", "subnqn": "nqn.2024-01.io.awide:c1",
            "traddr": "10.0.0.1", "eflags": "none"}
    log = parse_discover(_discovery(
        good,
        {**good, "subtype": "current discovery subsystem"},
        {**good, "subtype": "referral", "traddr": "10.9.9.9"},
        {**good, "traddr": "10.0.0.1 --nqn=x"},
        {**good, "trsvcid": "70000"},
        {**good, "subnqn": "../../etc"},
        {**good, "trtype": "fc"},
        "not an object",
    ))
    assert log.targets == (NvmeTarget("tcp", "10.0.0.1", 4420, "nqn.2024-01.io.awide:c1"),)
    assert log.skipped == 7
    assert log.publishes(NvmeTarget("tcp", "10.0.0.1", 4420, "nqn.2024-01.io.awide:c1"))
    assert not log.publishes(NvmeTarget("tcp", "10.0.0.1", 4421, "nqn.2024-01.io.awide:c1"))
    for junk in ("", "[]", "{}", '{"records": 3}', "nope",
                 _discovery(*[good] * (DISCOVERY_RECORDS_MAX + 1))):
        with pytest.raises(NvmeParseError):
            parse_discover(junk)
