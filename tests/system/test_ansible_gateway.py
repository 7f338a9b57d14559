"""The gateway role (ansible/roles/gateway) for real against localhost into a temp dir, with
the example inventory plus GPU hosts in the group `gateways` (one ansible run): gpu3's
gateway.yaml passes the gateway's own `awide-cluster gateway check-config` (the template task's
`validate:`) in cluster mode with its host NQN, etcd user, CA, password file, DH-HMAC-CHAP
secret file, DH-HMAC-CHAP controller key file and NVMe host ID file (an existing one kept)
and state directory; the secrets are root-only files, the controller key is the storage hosts'
keys file's third field; the storage hosts' exported cards allow the gateway hosts' NQNs
(next to awide_gateway_hostnqns); a gateway host without its NQN or its model is refused
before it is touched. The storage hosts also get an
operator-supplied etcd binary (checked against its SHA-256, run through a unit drop-in); one
whose checksum does not match is refused before it is copied. ansible-core comes with the
test extra; without it the tests skip, saying so. The rollout onto a real systemd host is
tests/system/test_nspawn.py.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from awide_gateway_cluster.config import load_config
from tests.system.ansible_support import target_python

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE = ROOT / "ansible"
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.timeout(600)

DHCHAP = {
    "nqn.2024-01.io.awide:gpu1": "DHHC-1:00:T50zLBgrqnvwGLqGoXa15nxG1ihDKwuDxyyRynTG/Hbyz/8e:",
    "nqn.2024-01.io.awide:gpu2": "DHHC-1:01:D6Y25SFLqHT7vCOivYoq6EpNBp1feQbQd2bgVfKQR+l5WMFq:",
    "nqn.2024-01.io.awide:gpu3": "DHHC-1:00:T50zLBgrqnvwGLqGoXa15nxG1ihDKwuDxyyRynTG/Hbyz/8e:",
}
# the controller key the cards prove to gpu3 (bidirectional; another secret than its own)
CTRL = {"nqn.2024-01.io.awide:gpu3": "DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:"}
HOSTID = "fc5d7cf3-2da3-497c-9a5d-9660e3b8585c"
ETCD_BINARY = b"#!/bin/sh\necho 'etcd Version: 3.5.17'\n"
MODEL = {"name": "test/model-7b", "num_layers": 4, "num_kv_heads": 2, "head_dim": 64}


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update({"ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "NO_COLOR": "1",
                "ANSIBLE_LOCALHOST_WARNING": "0", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
                "ANSIBLE_ROLES_PATH": str(cwd / "roles")})
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


def _roles(tmp: Path) -> None:
    """A copy of both roles whose handlers only say what they would do (localhost is no
    systemd host)."""
    for role in ("awide", "gateway"):
        shutil.copytree(ANSIBLE / "roles" / role, tmp / "roles" / role)
        real = yaml.safe_load((ANSIBLE / "roles" / role / "handlers" / "main.yml").read_text())
        stubs = [{"name": h["name"], "ansible.builtin.debug": {"msg": f"would run: {h['name']}"}}
                 for h in real]
        (tmp / "roles" / role / "handlers" / "main.yml").write_text(yaml.safe_dump(stubs))


def _render(tmp: Path, gateways: dict[str, dict[str, object]], dhchap: dict[str, str],
            ctrl: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Checks, TLS and config of the storage hosts (awide role), then checks and config of
    the gateway hosts (gateway role), local connection, paths under tmp."""
    if not (BIN / "ansible-playbook").exists():
        pytest.skip(f"ansible-playbook not in {BIN}: pip install -e '.[test]' (ansible-core)")
    _roles(tmp)
    inv = yaml.safe_load((ANSIBLE / "inventory.example.yml").read_text())
    inv["all"]["vars"].update({"ansible_connection": "local",
                               "ansible_python_interpreter": target_python(),
                               "awide_gateway_dhchap_keys": dhchap,
                               "awide_gateway_dhchap_ctrl_keys": ctrl})
    for group in inv["all"]["children"].values():
        for host, hv in group["hosts"].items():
            for card in hv.get("awide_cards", []):
                if card["kind"] == "dir":
                    card["path"] = str(tmp / "cards" / host / card["name"])
    inv["all"]["children"]["gateways"] = {"hosts": {
        name: {"ansible_host": f"10.0.1.{i + 3}", **hv}
        for i, (name, hv) in enumerate(gateways.items())}}
    (tmp / "inventory.yml").write_text(yaml.safe_dump(inv))
    out = tmp / "out"
    me = pwd.getpwuid(os.getuid()).pw_name
    common = {"awide_config_dir": f"{out}/{{{{ inventory_hostname }}}}",
              "awide_unit_dir": f"{out}/{{{{ inventory_hostname }}}}/units",
              "awide_bin": str(BIN / "awide-cluster"), "awide_user": me,
              "awide_group": grp.getgrgid(os.getgid()).gr_name, "awide_etcd_os_user": me,
              "awide_tls_pki_dir": str(tmp / "pki"), "awide_secrets_dir": str(tmp / "secrets")}
    binary = tmp / "etcd-3.5.17"
    binary.write_bytes(ETCD_BINARY)
    sha = hashlib.sha256(ETCD_BINARY).hexdigest()
    storage = {**common, "awide_etcd_binary": str(binary),
               "awide_etcd_binary_dest": f"{out}/{{{{ inventory_hostname }}}}/etcd",
               # witness-1 is given a checksum the binary does not have
               "awide_etcd_binary_sha256":
                   f"{{{{ '{'0' * 64}' if inventory_hostname == 'witness-1' else '{sha}' }}}}"}
    plays = [
        {"name": "Storage hosts", "hosts": "storage:witness", "gather_facts": False,
         "vars": storage, "tasks": [
             {"name": n, "ansible.builtin.import_role": {"name": "awide", "tasks_from": f}}
             for n, f in (("Checks", "checks.yml"), ("TLS", "tls.yml"),
                          ("Config", "config.yml"), ("Etcd binary", "etcd_binary.yml"))]},
        {"name": "Gateway hosts", "hosts": "gateways", "gather_facts": False,
         "vars": {**common,
                  "gateway_config_dir": f"{out}/{{{{ inventory_hostname }}}}/gateway",
                  "gateway_state_dir": f"{out}/{{{{ inventory_hostname }}}}/state",
                  "gateway_nvme_hostid_file": f"{out}/{{{{ inventory_hostname }}}}/nvme/hostid"},
         "tasks": [
             {"name": "Defaults", "ansible.builtin.import_role": {"name": "awide",
                                                                  "tasks_from": "noop.yml"}},
             *({"name": n, "ansible.builtin.import_role": {"name": "gateway", "tasks_from": f}}
               for n, f in (("Checks", "checks.yml"), ("Config", "config.yml")))]},
    ]
    (tmp / "render.yml").write_text(yaml.safe_dump(plays, sort_keys=False))
    # root-owned files are written as this user
    text = (tmp / "roles" / "gateway" / "tasks" / "config.yml").read_text()
    (tmp / "roles" / "gateway" / "tasks" / "config.yml").write_text(
        text.replace("owner: root", f"owner: {me}").replace(
            "group: root", f"group: {grp.getgrgid(os.getgid()).gr_name}"))
    # store-b, whose files no test reads, left out (its inventory entry stays: the cluster's
    # three members and endpoints)
    return _run([str(BIN / "ansible-playbook"), "-i", "inventory.yml", "--limit", "all:!store-b",
                 "render.yml"], tmp)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, int]:
    tmp = tmp_path_factory.mktemp("gateway-role")
    (tmp / "out" / "gpu3" / "nvme").mkdir(parents=True)     # nvme-cli's, kept as it is
    (tmp / "out" / "gpu3" / "nvme" / "hostid").write_text(HOSTID.upper() + "\n")
    r = _render(tmp, {"gpu3": {"gateway_hostnqn": "nqn.2024-01.io.awide:gpu3",
                               "gateway_model": MODEL},
                      "gpu4": {"gateway_model": MODEL},
                      "gpu5": {"gateway_hostnqn": "nqn.2024-01.io.awide:gpu5"}},
                {**DHCHAP, "nqn.2024-01.io.awide:gpu5": DHCHAP["nqn.2024-01.io.awide:gpu1"]},
                CTRL)
    return tmp, r.stdout, r.returncode


def test_the_gateway_config_and_its_credentials(rendered: tuple[Path, str, int]) -> None:
    tmp_path, stdout, _ = rendered
    assert _recap(stdout)["gpu3"]["failed"] == 0, stdout[-5000:]
    gw = tmp_path / "out" / "gpu3" / "gateway"
    cfg = load_config(gw / "gateway.yaml")            # the gateway's own validation
    assert (cfg.mode, cfg.cluster, cfg.host, cfg.id) == ("cluster", "prod1", "gpu3", "gpu3")
    assert cfg.etcd.username == "gateway:prod1:gpu3"
    assert [str(e) for e in cfg.etcd.endpoints] == [
        "https://10.0.0.11:2379", "https://10.0.0.12:2379", "https://10.0.0.13:2379"]
    assert cfg.nvme.hostnqn == "nqn.2024-01.io.awide:gpu3"
    assert cfg.nvme.dhchap_secret_file == gw / "dhchap.key"
    assert cfg.nvme.dhchap_ctrl_secret_file == gw / "dhchap-ctrl.key"
    # the secrets reach nvme-cli in a file with this host's ID: the existing one, kept
    assert cfg.nvme.hostid_file == tmp_path / "out" / "gpu3" / "nvme" / "hostid"
    assert cfg.nvme.hostid == HOSTID
    assert cfg.state.dir == tmp_path / "out" / "gpu3" / "state" and cfg.state.max_age == 86400
    assert cfg.timing.etcd_progress_notify == 1.4
    assert (gw / "dhchap.key").read_text().strip() == DHCHAP["nqn.2024-01.io.awide:gpu3"]
    password = (tmp_path / "secrets" / "gateway:prod1:gpu3").read_text().strip()
    assert (gw / "etcd-password").read_text().strip() == password
    assert (gw / "ca.crt").read_bytes() == (tmp_path / "pki" / "ca.crt").read_bytes()
    ctrl = CTRL["nqn.2024-01.io.awide:gpu3"]
    assert (gw / "dhchap-ctrl.key").read_text().strip() == ctrl
    for secret in ("dhchap.key", "dhchap-ctrl.key", "etcd-password"):
        assert stat.S_IMODE((gw / secret).stat().st_mode) == 0o600, secret
    assert stat.S_IMODE(cfg.state.dir.stat().st_mode) == 0o700
    assert password not in stdout and DHCHAP["nqn.2024-01.io.awide:gpu3"] not in stdout
    assert ctrl not in stdout
    # the storage host's keys file: the controller key as gpu3's third field (the export
    # writes it to hosts/<nqn>/dhchap_ctrl_key), the others' lines without one
    keys = (tmp_path / "out" / "store-a" / "cards" / "dhchap.keys").read_text().splitlines()
    lines = {ln.split()[0]: ln.split()[1:] for ln in keys if ln and not ln.startswith("#")}
    assert lines["nqn.2024-01.io.awide:gpu3"] == [DHCHAP["nqn.2024-01.io.awide:gpu3"], ctrl]
    assert lines["nqn.2024-01.io.awide:gpu1"] == [DHCHAP["nqn.2024-01.io.awide:gpu1"]]
    assert stat.S_IMODE((tmp_path / "out" / "store-a" / "cards" / "dhchap.keys").stat()
                        .st_mode) == 0o600
    # the storage host's exported card allows the gateway hosts' NQNs too (gpu4 gives none)
    env = (tmp_path / "out" / "store-a" / "cards" / "card0.env").read_text()
    allowed = re.search(r"^AWIDE_HOST_NQNS=(.*)$", env, re.M)
    assert allowed and allowed.group(1).split() == [
        "nqn.2024-01.io.awide:gpu1", "nqn.2024-01.io.awide:gpu2", "nqn.2024-01.io.awide:gpu3",
        "nqn.2024-01.io.awide:gpu5"]


@pytest.mark.parametrize(("host", "why"), [("gpu4", "give gateway_hostnqn"),
                                           ("gpu5", "gateway_model")])
def test_a_gateway_host_without_what_it_needs_is_refused(rendered: tuple[Path, str, int],
                                                         host: str, why: str) -> None:
    tmp_path, stdout, rc = rendered
    assert rc != 0 and _recap(stdout)[host]["failed"] == 1, stdout[-4000:]
    m = re.search(r"^fatal: \[" + host + r"\]: FAILED! => (.*)$", stdout, re.M)
    assert m and why in m.group(1), stdout[-4000:]
    assert not (tmp_path / "out" / host / "gateway" / "gateway.yaml").exists()


def _recap(stdout: str) -> dict[str, dict[str, int]]:
    recap: dict[str, dict[str, int]] = {}
    for m in re.finditer(r"^(\S+)\s+: ((?:\w+=\d+\s*)+)$", stdout, re.M):
        recap[m.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
    return recap


def test_an_operator_supplied_etcd_binary_is_checked_and_run(
        rendered: tuple[Path, str, int]) -> None:
    tmp_path, stdout, _ = rendered
    recap = _recap(stdout)
    assert recap["store-a"]["failed"] == 0, stdout[-5000:]
    out = tmp_path / "out" / "store-a"
    assert (out / "etcd").read_bytes() == ETCD_BINARY
    assert stat.S_IMODE((out / "etcd").stat().st_mode) == 0o755
    dropin = (out / "units" / "awide-etcd.service.d" / "binary.conf").read_text()
    assert f"ExecStart=\nExecStart={out / 'etcd'}\n" in dropin and "[Service]" in dropin
    # a checksum that does not match: refused, nothing copied
    assert recap["witness-1"]["failed"] == 1, stdout[-5000:]
    m = re.search(r"^fatal: \[witness-1\]: FAILED! => (.*)$", stdout, re.M)
    assert m and "awide_etcd_binary_sha256" in m.group(1), stdout[-4000:]
    assert not (tmp_path / "out" / "witness-1" / "etcd").exists()
