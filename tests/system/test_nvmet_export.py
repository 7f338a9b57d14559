"""awide-nvmet-export's access control, run against a configfs-shaped temp directory (this
kernel has no nvmet): only the listed host NQNs are linked into the subsystem's allowed_hosts
with attr_allow_any_host 0; an empty list is refused unless the loud opt-out is set; a bad NQN
is refused by name before anything is written; DH-HMAC-CHAP keys come from a private file and
never reach a command line."""

from __future__ import annotations

import ipaddress
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awide_cluster.contract.target import InvalidTarget, validate_nqn

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "systemd" / "awide-nvmet-export"
NQN = "nqn.2024-01.io.awide:card0"
GW1 = "nqn.2024-01.io.awide:gw1"
GW2 = "nqn.2014-08.org.nvmexpress:uuid:b97306f6-0dde-4ab1-a911-14ab9f32adc8"
KEY1 = "DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:"


def _export(tmp_path: Path, action: str = "up", **env: str) -> subprocess.CompletedProcess:
    base = {"AWIDE_NQN": NQN, "AWIDE_DEVICE": "/dev/nvme0n1", "AWIDE_TRTYPE": "tcp",
            "AWIDE_TRADDR": "10.200.0.11", "AWIDE_TRSVCID": "4420", "AWIDE_PORT_ID": "1",
            "NVMET_ROOT": str(tmp_path / "nvmet"), "AWIDE_HOST_NQNS": f"{GW1} {GW2}",
            "PATH": os.environ["PATH"]}
    base.update(env)
    return subprocess.run([str(SCRIPT), action, "card0"], capture_output=True, text=True,
                          env=base, timeout=10)


def _sub(tmp_path: Path) -> Path:
    return tmp_path / "nvmet" / "subsystems" / NQN


def test_only_the_listed_hosts_are_allowed(tmp_path: Path) -> None:
    r = _export(tmp_path)
    assert r.returncode == 0, r.stderr
    sub = _sub(tmp_path)
    assert (sub / "attr_allow_any_host").read_text().strip() == "0"
    links = {p.name: p for p in (sub / "allowed_hosts").iterdir()}
    assert set(links) == {GW1, GW2}
    for name, link in links.items():
        assert link.is_symlink()
        assert Path(os.readlink(link)) == tmp_path / "nvmet" / "hosts" / name
        assert (tmp_path / "nvmet" / "hosts" / name).is_dir()
    assert f"to hosts {GW1} {GW2}" in r.stdout


def test_a_host_taken_off_the_list_loses_its_link(tmp_path: Path) -> None:
    assert _export(tmp_path).returncode == 0
    r = _export(tmp_path, AWIDE_HOST_NQNS=GW2)
    assert r.returncode == 0, r.stderr
    assert [p.name for p in (_sub(tmp_path) / "allowed_hosts").iterdir()] == [GW2]
    assert (_sub(tmp_path) / "attr_allow_any_host").read_text().strip() == "0"


@pytest.mark.parametrize("hosts", ["", "   "])
def test_an_empty_list_is_refused(tmp_path: Path, hosts: str) -> None:
    r = _export(tmp_path, AWIDE_HOST_NQNS=hosts)
    assert r.returncode == 2
    assert "AWIDE_HOST_NQNS is empty" in r.stderr and "AWIDE_INSECURE_ANY_HOST" in r.stderr
    assert not (tmp_path / "nvmet").exists()


def test_the_loud_opt_out_allows_any_host_and_says_so(tmp_path: Path) -> None:
    assert _export(tmp_path).returncode == 0
    r = _export(tmp_path, AWIDE_HOST_NQNS="", AWIDE_INSECURE_ANY_HOST="yes")
    assert r.returncode == 0, r.stderr
    assert "WARNING" in r.stderr and "ANY NVMe-oF initiator" in r.stderr
    assert (_sub(tmp_path) / "attr_allow_any_host").read_text().strip() == "1"
    assert list((_sub(tmp_path) / "allowed_hosts").iterdir()) == []


@pytest.mark.parametrize("env,named", [
    ({"AWIDE_HOST_NQNS": f"{GW1} nqn.2024-01.io.evil:x,hostnqn=y"},
     "'nqn.2024-01.io.evil:x,hostnqn=y' has characters outside"),
    ({"AWIDE_HOST_NQNS": "gateway-1"}, "'gateway-1' is not an NQN"),
    ({"AWIDE_HOST_NQNS": "nqn.2024-13.io.awide:gw"}, "nqn.2024-13.io.awide:gw"),
    ({"AWIDE_HOST_NQNS": "nqn.2024-01.io.awide:" + "x" * 210}, "longer than 223 bytes"),
    ({"AWIDE_HOST_NQNS": "../../etc"}, "'../../etc'"),
    ({"AWIDE_HOST_NQNS": "*"}, "'*'"),
    ({"AWIDE_HOST_NQNS": GW1, "AWIDE_INSECURE_ANY_HOST": "yes"}, "choose one"),
    ({"AWIDE_INSECURE_ANY_HOST": "1"}, "AWIDE_INSECURE_ANY_HOST must be yes or no"),
])
def test_bad_host_settings_are_refused_by_name(tmp_path: Path, env: dict, named: str) -> None:
    r = _export(tmp_path, **env)
    assert r.returncode == 2, r.stdout
    assert named in r.stderr
    assert not (tmp_path / "nvmet").exists()


def _keys(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "dhchap.keys"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_dhchap_keys_are_written_per_host(tmp_path: Path) -> None:
    key2 = KEY1.replace("DHHC-1:00:", "DHHC-1:01:")
    keys = _keys(tmp_path, f"# host key\n{GW1} {KEY1}\n{GW2} {key2}\n")
    r = _export(tmp_path, AWIDE_DHCHAP_KEYS_FILE=str(keys))
    assert r.returncode == 0, r.stderr
    hosts = tmp_path / "nvmet" / "hosts"
    assert (hosts / GW1 / "dhchap_key").read_text() == KEY1 + "\n"
    assert (hosts / GW2 / "dhchap_key").read_text() == key2 + "\n"
    assert "(DH-HMAC-CHAP)" in r.stdout
    assert KEY1 not in r.stdout + r.stderr


def test_a_controller_key_is_written_for_bidirectional_authentication(tmp_path: Path) -> None:
    ctrl = KEY1.replace("DHHC-1:00:", "DHHC-1:02:")
    keys = _keys(tmp_path, f"{GW1} {KEY1} {ctrl}\n{GW2} {KEY1}\n")
    r = _export(tmp_path, AWIDE_DHCHAP_KEYS_FILE=str(keys))
    assert r.returncode == 0, r.stderr
    hosts = tmp_path / "nvmet" / "hosts"
    assert (hosts / GW1 / "dhchap_ctrl_key").read_text() == ctrl + "\n"
    assert not (hosts / GW2 / "dhchap_ctrl_key").exists()
    assert ctrl not in r.stdout + r.stderr
    bad = _keys(tmp_path, f"{GW1} {KEY1} hunter2\n{GW2} {KEY1}\n")
    r = _export(tmp_path, AWIDE_DHCHAP_KEYS_FILE=str(bad))
    assert r.returncode == 2 and f"the controller key of {GW1} is not a DHHC-1" in r.stderr
    assert "hunter2" not in r.stderr


@pytest.mark.parametrize("text,mode,named", [
    (f"{GW1} {KEY1}\n", 0o640, "readable by others (mode 640)"),
    (f"{GW1} {KEY1}\n", 0o604, "readable by others (mode 604)"),
    (f"{GW1} {KEY1}\n", 0o600, f"has no key for host {GW2}"),
    (f"{GW1} hunter2\n{GW2} {KEY1}\n", 0o600, f"the key of {GW1} is not a DHHC-1"),
])
def test_bad_dhchap_keys_are_refused_without_showing_them(tmp_path: Path, text: str, mode: int,
                                                          named: str) -> None:
    keys = _keys(tmp_path, text, mode)
    r = _export(tmp_path, AWIDE_DHCHAP_KEYS_FILE=str(keys))
    assert r.returncode == 2, r.stdout
    assert named in r.stderr
    assert "hunter2" not in r.stderr and KEY1 not in r.stderr


def test_the_dhchap_key_never_reaches_a_command_line(tmp_path: Path) -> None:
    """Every program the script runs, traced: none has the key in its argv (the key moves
    through shell builtins only)."""
    keys = _keys(tmp_path, f"{GW1} {KEY1}\n{GW2} {KEY1}\n")
    trace = tmp_path / "argv.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for prog in ("mkdir", "ln", "rm", "stat", "id"):
        real = subprocess.run(["sh", "-c", f"command -v {prog}"], capture_output=True,
                              text=True, check=True).stdout.strip()
        wrapper = bin_dir / prog
        wrapper.write_text(f'#!/bin/sh\necho "{prog} $*" >> {trace}\nexec {real} "$@"\n')
        wrapper.chmod(0o755)
    r = _export(tmp_path, AWIDE_DHCHAP_KEYS_FILE=str(keys),
                PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert r.returncode == 0, r.stderr
    log = trace.read_text()
    assert "mkdir" in log and "ln -s" in log           # the trace saw the programs
    assert "DHHC-1" not in log


# --- the script's NQN rule is the gateway library's ---------------------------------------------

_NQN_CHARS = "abcXYZ019.-_:@+,=/ "
_LABELS = ["io", "awide", "a-b", "x1", "7", "-a", "a-", "", "a_b", "A"]


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(date=st.sampled_from(["2024-01", "2014-08", "2024-12", "2024-13", "2024-00", "24-01"]),
       domain=st.lists(st.sampled_from(_LABELS), min_size=1, max_size=3).map(".".join),
       name=st.one_of(st.text("abXY09.-_:@+", min_size=1, max_size=6),
                      st.text(_NQN_CHARS, min_size=0, max_size=6)),
       extra=st.sampled_from(["", "x" * 220]))
def test_the_script_accepts_exactly_the_nqns_the_library_accepts(
        tmp_path: Path, date: str, domain: str, name: str, extra: str) -> None:
    nqn = f"nqn.{date}.{domain}:{name}{extra}"
    try:
        validate_nqn(nqn, "hostnqn")
        library = True
    except InvalidTarget:
        library = False
    r = _export(tmp_path, "down", AWIDE_HOST_NQNS=nqn)
    script = r.returncode == 0
    if " " in nqn:      # a space separates hosts in AWIDE_HOST_NQNS: each part is judged
        assert script == all(_library_accepts(part) for part in nqn.split())
    else:
        assert script == library, (nqn, r.stderr)
    if not script:
        assert "AWIDE_HOST_NQNS" in r.stderr


def _library_accepts(nqn: str) -> bool:
    try:
        validate_nqn(nqn)
        return True
    except InvalidTarget:
        return False


@pytest.mark.parametrize("env,named", [
    ({"AWIDE_TRADDR": "storage-a.example"}, "AWIDE_TRADDR 'storage-a.example' is not an IPv4"),
    ({"AWIDE_TRADDR": "10.0.0.1\n10.6.6.6"}, "AWIDE_TRADDR"),
    ({"AWIDE_TRADDR": "10.0.0.256"}, "AWIDE_TRADDR"),
    ({"AWIDE_TRADDR": "fe80::1%eth0"}, "AWIDE_TRADDR"),
    ({"AWIDE_TRSVCID": "0"}, "AWIDE_TRSVCID '0' must be a number 1-65535"),
    ({"AWIDE_TRSVCID": "65536"}, "AWIDE_TRSVCID '65536'"),
    ({"AWIDE_TRSVCID": "4420 "}, "AWIDE_TRSVCID"),
    ({"AWIDE_PORT_ID": "123456"}, "AWIDE_PORT_ID '123456' must be a number 0-65535"),
    ({"AWIDE_DEVICE": "nvme0n1"}, "AWIDE_DEVICE 'nvme0n1' must be an absolute path"),
    ({"AWIDE_DEVICE": "/etc/shadow"}, "AWIDE_DEVICE '/etc/shadow' must be under /dev/"),
    ({"AWIDE_DEVICE": "/dev/../etc/shadow"}, "no '..'"),
    ({"AWIDE_DEVICE": "/dev/nvme0n1\n/dev/sda"}, "AWIDE_DEVICE"),
    ({"AWIDE_DEVICE": "/dev/disk/by-id/nvme x"}, "has characters outside"),
    ({"NVMET_ROOT": "relative/nvmet"}, "NVMET_ROOT 'relative/nvmet' must be an absolute path"),
    ({"AWIDE_DHCHAP_KEYS_FILE": "dhchap.keys"}, "AWIDE_DHCHAP_KEYS_FILE 'dhchap.keys'"),
])
def test_every_environment_value_is_checked_by_name(tmp_path: Path, env: dict,
                                                    named: str) -> None:
    r = _export(tmp_path, **env)
    assert r.returncode == 2, r.stdout
    assert named in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "nvmet").exists()


def test_a_card_name_that_is_not_a_name_is_refused(tmp_path: Path) -> None:
    r = subprocess.run([str(SCRIPT), "up", "card0;x"], capture_output=True, text=True,
                       env={"PATH": os.environ["PATH"]}, timeout=10)
    assert r.returncode == 2 and "card name 'card0;x'" in r.stderr


@pytest.mark.parametrize("addr,fam", [("10.200.0.11", "ipv4"), ("fd00::11", "ipv6"),
                                      ("::ffff:10.0.0.1", "ipv6")])
def test_an_address_is_written_with_its_family(tmp_path: Path, addr: str, fam: str) -> None:
    r = _export(tmp_path, AWIDE_TRADDR=addr, AWIDE_TRSVCID="65535", AWIDE_PORT_ID="0",
                AWIDE_DEVICE="/dev/disk/by-path/pci-0000:01:00.0-nvme-1")
    assert r.returncode == 0, r.stderr
    port = tmp_path / "nvmet" / "ports" / "0"
    assert (port / "addr_traddr").read_text() == addr + "\n"
    assert (port / "addr_adrfam").read_text() == fam + "\n"


def _python_accepts(addr: str) -> bool:
    try:
        ipaddress.ip_address(addr)
    except ValueError:
        return False
    return "%" not in addr


_ADDR_CHARS = "0123456789abcdefABCDEF:."


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(addr=st.one_of(st.ip_addresses().map(str),
                      st.ip_addresses(v=6).map(lambda a: a.exploded),
                      st.ip_addresses(v=4).map(lambda a: f"::ffff:{a}"),
                      st.text(_ADDR_CHARS, min_size=0, max_size=12),
                      st.lists(st.text("0123456789abcdef", max_size=5), min_size=1,
                               max_size=10).map(":".join),
                      st.lists(st.text("0123456789", max_size=4), min_size=1,
                               max_size=5).map(".".join)))
def test_the_script_accepts_exactly_the_addresses_python_accepts(tmp_path: Path,
                                                                 addr: str) -> None:
    r = _export(tmp_path, "down", AWIDE_TRADDR=addr)
    assert (r.returncode == 0) == _python_accepts(addr), (addr, r.stderr)
