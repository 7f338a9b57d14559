"""What the two files of the role's NVMe-oF access and secrets tests share
(test_ansible_secrets.py: the example inventory rendered with --check --diff and for real;
test_ansible_access_checks.py: the loud opt-outs and the inventory checks' refusals): the
example inventory on a local connection with its paths under a temp dir, the secrets as
ansible-vault values, and ansible-playbook run with the settings of these tests.

Two files, so that `make test` (`--dist loadfile`) runs them on two workers side by side.
"""

from __future__ import annotations

import grp
import os
import pwd
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.system.ansible_support import (  # noqa: F401 (some for the tests to import)
    ANSIBLE,
    BIN,
    ROLE,
    ROOT,
    _env,
    _handlers_are_stubbed,
    _recap,
    target_python,
)

DHCHAP = {
    "nqn.2024-01.io.awide:gpu1": "DHHC-1:00:T50zLBgrqnvwGLqGoXa15nxG1ihDKwuDxyyRynTG/Hbyz/8e:",
    "nqn.2024-01.io.awide:gpu2": "DHHC-1:01:D6Y25SFLqHT7vCOivYoq6EpNBp1feQbQd2bgVfKQR+l5WMFq:",
}
ETCD_PASSWORD = "daemon-pw-93ac51e7"
ETCDCTL_PASSWORD = "etcdctl-pw-7d1f02b4"
SECRETS = [*DHCHAP.values(), ETCD_PASSWORD, ETCDCTL_PASSWORD]
VAULT_PASSWORD = "vault-pw-for-the-test"

# The render's tasks files of the awide role, in the order of site.yml (name, tasks file).
RENDER = (("Checks", "checks.yml"), ("TLS", "tls.yml"), ("Config", "config.yml"),
          ("Etcd flags", "etcd_env.yml"), ("Housekeeping", "maintenance_files.yml"))


def _run(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300,
                          env=_env(**env))


def tools_dir() -> Path:
    return BIN


@pytest.fixture(scope="module")
def tools() -> Path:
    missing = [p for p in ("ansible-playbook", "ansible-vault") if not (BIN / p).exists()]
    if missing:
        pytest.skip(f"{', '.join(missing)} not in {BIN}: pip install -e '.[test]' (ansible-core)")
    return BIN


_VAULTED: dict[tuple[str, str], str] = {}


def _vaulted(tools: Path, tmp: Path, value: str, name: str) -> str:
    """``value`` encrypted with VAULT_PASSWORD as the ``name:`` entry of a vars file; encrypted
    once per module (every setup uses the same password; ansible-vault starts in seconds)."""
    if (value, name) not in _VAULTED:
        r = _run([str(tools / "ansible-vault"), "encrypt_string", "--vault-password-file",
                  str(tmp / "vault-pw"), "--name", name, value], cwd=tmp)
        assert r.returncode == 0, r.stderr
        _VAULTED[value, name] = r.stdout
    return _VAULTED[value, name]


def _dhchap_vars(tools: Path, tmp: Path, dhchap: dict[str, str]) -> str:
    """awide_gateway_dhchap_keys as a vars file's text: the first key plain, the second
    vault-encrypted (as in the secrets of _setup)."""
    keys = list(dhchap.items())
    return ("awide_gateway_dhchap_keys:\n" + f'  "{keys[0][0]}": "{keys[0][1]}"\n'
            + _vaulted(tools, tmp, keys[1][1], f'  "{keys[1][0]}"'))


def _setup(tools: Path, tmp: Path, render: tuple[tuple[str, str], ...] = RENDER,
           **over: object) -> dict[str, Path]:
    """The example inventory on a local connection, its paths under tmp, and the secrets in a
    vars file, two of them as vault-encrypted strings. render.yml runs the tasks files of
    ``render`` (all of RENDER by default), the TLS ones only when etcd speaks https, as in
    the role's etcd_files.yml; tls.yml the checks and the TLS tasks (a renewal)."""
    roles = _handlers_are_stubbed(tmp)
    inv = yaml.safe_load((ANSIBLE / "inventory.example.yml").read_text())
    inv["all"]["vars"].update({"ansible_connection": "local",
                               "ansible_python_interpreter": target_python()})
    for group in inv["all"]["children"].values():
        for host, hv in group["hosts"].items():
            for card in hv.get("awide_cards", []):
                if card["kind"] == "dir":
                    card["path"] = str(tmp / "cards" / host / card["name"])
    (tmp / "inventory.yml").write_text(yaml.safe_dump(inv))
    (tmp / "vault-pw").write_text(VAULT_PASSWORD + "\n")
    # store-a's etcd user and root from the vault, the other users' passwords generated
    secrets = (
        "awide_etcd_passwords:\n"
        + _vaulted(tools, tmp, ETCD_PASSWORD, '  "host:prod1:store-a"')
        + _vaulted(tools, tmp, ETCDCTL_PASSWORD, '  "root"')
        + _dhchap_vars(tools, tmp, DHCHAP)
    )
    (tmp / "secrets.yml").write_text(secrets)
    out = tmp / "out"
    play_vars = {
        "awide_config_dir": f"{out}/{{{{ inventory_hostname }}}}",
        "awide_unit_dir": f"{out}/{{{{ inventory_hostname }}}}/units",
        "awide_bin": str(BIN / "awide-cluster"),
        "awide_user": pwd.getpwuid(os.getuid()).pw_name,
        "awide_group": grp.getgrgid(os.getgid()).gr_name,
        "awide_etcd_os_user": pwd.getpwuid(os.getuid()).pw_name,
        "awide_tls_pki_dir": str(tmp / "pki"),
        "awide_secrets_dir": str(tmp / "secrets"),
        **over,
    }

    def task(name: str, tasks_from: str) -> dict[str, object]:
        t: dict[str, object] = {"name": name, "ansible.builtin.import_role": {
            "name": "awide", "tasks_from": tasks_from}}
        if tasks_from == "tls.yml":
            t["when"] = "awide_etcd_scheme == 'https'"
        return t

    play = {"name": "Render the example inventory", "hosts": "storage:witness",
            "gather_facts": False, "vars": play_vars}
    (tmp / "render.yml").write_text(yaml.safe_dump(
        [{**play, "tasks": [task(*t) for t in render]}], sort_keys=False))
    # the same play with the checks and the TLS tasks only (a renewal)
    (tmp / "tls.yml").write_text(yaml.safe_dump(
        [{**play, "tasks": [task(*t) for t in RENDER[:2]]}], sort_keys=False))
    return {"tmp": tmp, "out": out, "roles": roles}


def _playbook(tools: Path, s: dict[str, Path], *flags: str,
              playbook: str = "render.yml") -> subprocess.CompletedProcess[str]:
    return _run([str(tools / "ansible-playbook"), "-i", "inventory.yml", "-e", "@secrets.yml",
                 "--vault-password-file", "vault-pw", *flags, playbook], cwd=s["tmp"],
                ANSIBLE_ROLES_PATH=str(s["roles"]))


def _text(r: subprocess.CompletedProcess[str]) -> str:
    return r.stdout + r.stderr
