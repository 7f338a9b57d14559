"""The role's NVMe-oF access and secrets, for the example inventory: rendered with
``ansible-playbook --check --diff`` (what an operator sees before a rollout) and then for real
into a temp dir, with secrets given as ansible-vault values. The diff shows the cards' env files
with their allow-lists and no ``allow_any_host``, and no secret value appears in any output; the
secret files are written with their modes; bad allow-lists are refused by the inventory checks.

ansible-core comes with the test extra; without it the tests skip, saying so.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from awide_cluster.contract.target import InvalidTarget, validate_nqn

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE = ROOT / "ansible"
ROLE = ANSIBLE / "roles" / "awide"
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.timeout(600)

DHCHAP = {
    "nqn.2024-01.io.awide:gpu1": "DHHC-1:00:T50zLBgrqnvwGLqGoXa15nxG1ihDKwuDxyyRynTG/Hbyz/8e:",
    "nqn.2024-01.io.awide:gpu2": "DHHC-1:01:D6Y25SFLqHT7vCOivYoq6EpNBp1feQbQd2bgVfKQR+l5WMFq:",
}
ETCD_PASSWORD = "daemon-pw-93ac51e7"
ETCDCTL_PASSWORD = "etcdctl-pw-7d1f02b4"
SECRETS = [*DHCHAP.values(), ETCD_PASSWORD, ETCDCTL_PASSWORD]
VAULT_PASSWORD = "vault-pw-for-the-test"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update({"ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "NO_COLOR": "1",
                "ANSIBLE_LOCALHOST_WARNING": "0", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0"})
    env.update(extra)
    return env


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


def _stub_handlers(tmp: Path) -> Path:
    roles = tmp / "roles"
    shutil.copytree(ROLE, roles / "awide")
    real = yaml.safe_load((ROLE / "handlers" / "main.yml").read_text())
    stubs = [{"name": h["name"], "ansible.builtin.debug": {"msg": f"would run: {h['name']}"}}
             for h in real]
    (roles / "awide" / "handlers" / "main.yml").write_text(yaml.safe_dump(stubs))
    return roles


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


def _setup(tools: Path, tmp: Path, **over: object) -> dict[str, Path]:
    """The example inventory on a local connection, its paths under tmp, and the secrets in a
    vars file, two of them as vault-encrypted strings."""
    roles = _stub_handlers(tmp)
    inv = yaml.safe_load((ANSIBLE / "inventory.example.yml").read_text())
    inv["all"]["vars"].update({"ansible_connection": "local",
                               "ansible_python_interpreter": sys.executable})
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
    tasks = [{"name": n, "ansible.builtin.import_role": {"name": "awide", "tasks_from": f}}
             for n, f in (("Checks", "checks.yml"), ("TLS", "tls.yml"), ("Config", "config.yml"),
                          ("Etcd flags", "etcd_env.yml"),
                          ("Housekeeping", "maintenance_files.yml"))]
    play = {"name": "Render the example inventory", "hosts": "storage:witness",
            "gather_facts": False, "vars": play_vars}
    (tmp / "render.yml").write_text(yaml.safe_dump([{**play, "tasks": tasks}], sort_keys=False))
    # the same play with the checks and the TLS tasks only (a renewal)
    (tmp / "tls.yml").write_text(yaml.safe_dump([{**play, "tasks": tasks[:2]}],
                                                 sort_keys=False))
    return {"tmp": tmp, "out": out, "roles": roles}


def _playbook(tools: Path, s: dict[str, Path], *flags: str,
              playbook: str = "render.yml") -> subprocess.CompletedProcess[str]:
    return _run([str(tools / "ansible-playbook"), "-i", "inventory.yml", "-e", "@secrets.yml",
                 "--vault-password-file", "vault-pw", *flags, playbook], cwd=s["tmp"],
                ANSIBLE_ROLES_PATH=str(s["roles"]))


@pytest.fixture(scope="module")
def runs(tools: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    s = _setup(tools, tmp_path_factory.mktemp("ansible-secrets"))
    check = _playbook(tools, s, "--check", "--diff")
    real = _playbook(tools, s, "--diff", "-v")
    return {**s, "check": check, "real": real}


def _text(r: subprocess.CompletedProcess[str]) -> str:
    return r.stdout + r.stderr


def test_the_check_diff_shows_allow_lists_and_no_allow_any_host(runs: dict) -> None:
    r = runs["check"]
    assert r.returncode == 0, _text(r)[-4000:]
    text = _text(r)
    hosts = "AWIDE_HOST_NQNS=nqn.2024-01.io.awide:gpu1 nqn.2024-01.io.awide:gpu2"
    assert text.count(hosts) == 2, text[-4000:]            # card0 of store-a and of store-b
    assert "AWIDE_DHCHAP_KEYS_FILE=" in text
    assert "allow_any_host" not in text.lower() and "ANY_HOST" not in text


def _generated(runs: dict) -> list[str]:
    """The passwords the role generated (kept on the controller) and the private keys' first
    lines (which hold the private scalar; the later ones also encode the public key, which the
    certificates shown by --diff carry too)."""
    found = [p.read_text().strip() for p in (runs["tmp"] / "secrets").iterdir()]
    keys = [p.read_text().splitlines()[1] for p in (runs["tmp"] / "pki").glob("*.key")]
    return found + keys


def test_no_secret_in_any_output(runs: dict) -> None:
    generated = _generated(runs)
    assert len(generated) >= 2 + 4            # store-b's and witness-1's passwords, 4 keys
    for name in ("check", "real"):
        text = _text(runs[name])
        leaked = [s for s in SECRETS if s in text]
        assert not leaked, f"{name}: {leaked}"
        assert not [s for s in generated if s in text], name
        assert "PRIVATE KEY" not in text, name


def test_no_plain_http_in_the_diff_nor_the_files(runs: dict) -> None:
    """TLS by default: every etcd URL the role writes is https (the only http:// it may write
    is the documented opt-out, awide_etcd_insecure_plaintext, below)."""
    for name in ("check", "real"):
        text = _text(runs[name])
        assert runs[name].returncode == 0, text[-3000:]
        assert "http://" not in text, name
        assert "https://10.0.0.11:2379" in text and "allow_plaintext" not in text, name
    for f in runs["out"].rglob("*"):
        if f.is_file() and "monitoring" not in f.parts:
            assert "http://" not in f.read_text(), f


def test_keys_are_private_and_certificates_chain_to_the_cluster_ca(runs: dict) -> None:
    pki = runs["tmp"] / "pki"
    assert pki.stat().st_mode & 0o777 == 0o700
    assert (pki / "ca.key").stat().st_mode & 0o777 == 0o600
    for host, addr in (("store-a", "10.0.0.11"), ("witness-1", "10.0.0.13")):
        tls = runs["out"] / host / "tls"
        assert (tls / "etcd.key").stat().st_mode & 0o777 == 0o600
        assert (tls / "etcd.key").stat().st_uid == os.getuid()     # awide_etcd_os_user's
        assert (tls / "ca.crt").read_bytes() == (pki / "ca.crt").read_bytes()
        r = subprocess.run(["openssl", "verify", "-CAfile", str(tls / "ca.crt"),
                            "-purpose", "sslserver", str(tls / "etcd.crt")],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
        text = subprocess.run(["openssl", "x509", "-in", str(tls / "etcd.crt"), "-noout",
                               "-text"], capture_output=True, text=True, timeout=30).stdout
        assert f"IP Address:{addr}" in text and "IP Address:127.0.0.1" in text
        assert f"DNS:{host}" in text and "TLS Web Client Authentication" in text


def test_renewal_issues_new_certificates_from_the_same_ca(runs: dict) -> None:
    tls = runs["out"] / "store-a" / "tls"
    before = {n: (tls / n).read_bytes() for n in ("ca.crt", "etcd.crt", "etcd.key")}
    # the checks and the TLS tasks of the render (the others do not touch certificates)
    r = _playbook(tools_dir(), runs, "-e", "awide_tls_renew=true", "--diff", playbook="tls.yml")
    assert r.returncode == 0, _text(r)[-3000:]
    after = {n: (tls / n).read_bytes() for n in ("ca.crt", "etcd.crt", "etcd.key")}
    assert after["ca.crt"] == before["ca.crt"]
    assert after["etcd.crt"] != before["etcd.crt"] and after["etcd.key"] != before["etcd.key"]
    r2 = subprocess.run(["openssl", "verify", "-CAfile", str(tls / "ca.crt"),
                         str(tls / "etcd.crt")], capture_output=True, text=True, timeout=30)
    assert r2.returncode == 0, r2.stdout + r2.stderr
    assert "PRIVATE KEY" not in _text(r)
    assert not [s for s in _generated(runs) if s in _text(r)]


def test_secret_files_are_written_private(runs: dict) -> None:
    r = runs["real"]
    assert r.returncode == 0, _text(r)[-4000:]
    out = runs["out"]
    keys = out / "store-a" / "cards" / "dhchap.keys"
    assert keys.stat().st_mode & 0o777 == 0o600
    lines = [ln.split() for ln in keys.read_text().splitlines() if not ln.startswith("#")]
    assert dict(lines) == DHCHAP
    assert not (out / "witness-1" / "cards" / "dhchap.keys").exists()   # no exported card
    pw = out / "store-a" / "etcd-password"
    assert pw.stat().st_mode & 0o777 == 0o640 and pw.read_text() == ETCD_PASSWORD + "\n"
    cluster = yaml.safe_load((out / "store-a" / "cluster.yaml").read_text())
    assert cluster["etcd"]["password_file"] == str(pw)
    assert cluster["etcd"]["username"] == "host:prod1:store-a"
    # a host whose password the vault does not give: its own, generated, kept on the controller
    generated = (runs["tmp"] / "secrets" / "host:prod1:store-b").read_text().strip()
    assert (out / "store-b" / "etcd-password").read_text() == generated + "\n"
    assert generated != ETCD_PASSWORD
    assert "password" not in cluster["etcd"]
    assert ETCD_PASSWORD not in (out / "store-a" / "cluster.yaml").read_text()
    etcdctl = out / "witness-1" / "etcdctl.env"
    assert etcdctl.stat().st_mode & 0o777 == 0o600
    assert f"ETCDCTL_USER=root:{ETCDCTL_PASSWORD}" in etcdctl.read_text()
    env = (out / "store-b" / "cards" / "card0.env").read_text()
    assert "AWIDE_HOST_NQNS=nqn.2024-01.io.awide:gpu1 nqn.2024-01.io.awide:gpu2\n" in env
    assert f"AWIDE_DHCHAP_KEYS_FILE={out}/store-b/cards/dhchap.keys\n" in env


def test_the_rendered_card_env_drives_the_export_script(runs: dict, tmp_path: Path) -> None:
    """The env file as systemd would pass it: the script allows exactly the listed hosts."""
    env = dict(line.split("=", 1) for line in
               (runs["out"] / "store-a" / "cards" / "card0.env").read_text().splitlines()
               if line and not line.startswith("#"))
    env.update({"NVMET_ROOT": str(tmp_path / "nvmet"), "PATH": os.environ["PATH"]})
    r = subprocess.run([str(ROOT / "systemd" / "awide-nvmet-export"), "up", "card0"],
                       capture_output=True, text=True, env=env, timeout=10)
    assert r.returncode == 0, r.stderr
    sub = tmp_path / "nvmet" / "subsystems" / "nqn.2024-01.io.awide:store-a-card0"
    assert sorted(p.name for p in (sub / "allowed_hosts").iterdir()) == sorted(DHCHAP)
    assert (sub / "attr_allow_any_host").read_text().strip() == "0"
    hosts = tmp_path / "nvmet" / "hosts"
    assert {h: (hosts / h / "dhchap_key").read_text().strip() for h in DHCHAP} == DHCHAP


def test_plain_http_only_with_the_loud_opt_out(tools: Path, tmp_path: Path) -> None:
    s = _setup(tools, tmp_path, awide_etcd_insecure_plaintext=True)
    r = _playbook(tools, s, "--check", "--diff")
    assert r.returncode == 0, _text(r)[-3000:]
    text = _text(r)
    assert "http://10.0.0.11:2379" in text and "https://" not in text
    assert "allow_plaintext: true" in text and "awide_etcd_insecure_plaintext is true" in text
    assert "ETCD_PEER_CLIENT_CERT_AUTH" not in text and "username" not in text
    # setting the scheme by hand is refused: REFUSED["http-by-hand"] below


def test_the_loud_opt_out_is_written_instead_of_the_list(tools: Path, tmp_path: Path) -> None:
    s = _setup(tools, tmp_path, awide_gateway_hostnqns=[], awide_nvmet_insecure_any_host=True)
    r = _playbook(tools, s, "--check", "--diff")
    assert r.returncode == 0, _text(r)[-3000:]
    assert _text(r).count("AWIDE_INSECURE_ANY_HOST=yes") == 2
    assert "AWIDE_HOST_NQNS" not in _text(r) and "AWIDE_DHCHAP_KEYS_FILE" not in _text(r)


# Each refused host carries one bad setting (the rest as store-a's); the words its refusal must
# say. One run of the inventory checks over all of them and store-a (which passes).
MALFORMED = {**DHCHAP, "nqn.2024-01.io.awide:gpu1": "DHHC-1:00:not-a-key-3f9a:"}
REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "no-list": ({"awide_gateway_hostnqns": []}, "must list the gateways' host NQNs"),
    "bad-key": ({"dhchap": MALFORMED}, "hosts with a malformed key: ['nqn.2024-01.io.awide:gpu1']"),
    "bad-nqn": ({"awide_gateway_hostnqns": ["nqn.2024-01.io.awide:gpu1", "gpu2,evil"]},
                "gpu2,evil"),
    "no-key": ({"awide_gateway_hostnqns": ["nqn.2024-01.io.awide:gpu1",
                                           "nqn.2024-01.io.awide:gpu3"]},
               "missing: ['nqn.2024-01.io.awide:gpu3']"),
    "inline-pw": ({"awide_config_extra": {"etcd": {"username": "u", "password": "inline-pw"}}},
                  "set awide_etcd_password"),
    # setting the scheme by hand is no way around the loud name (awide_etcd_insecure_plaintext)
    "http-by-hand": ({"awide_etcd_scheme": "http"}, "awide_etcd_insecure_plaintext=true"),
}


@pytest.fixture(scope="module")
def refusals(tools: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The role's inventory checks (checks.yml, --check) run once over store-a of the example
    inventory and one host per REFUSED entry, each with store-a's cards and one bad setting as
    its host variables (the DH-HMAC-CHAP keys in host_vars, one of them vault-encrypted; the
    etcd passwords from the vault as extra vars)."""
    tmp = tmp_path_factory.mktemp("ansible-refusals")
    (tmp / "vault-pw").write_text(VAULT_PASSWORD + "\n")
    inv = yaml.safe_load((ANSIBLE / "inventory.example.yml").read_text())
    store_a = inv["all"]["children"]["storage"]["hosts"]["store-a"]
    hosts: dict[str, dict] = {"store-a": store_a}
    (tmp / "host_vars").mkdir()
    for i, (host, (over, _)) in enumerate(REFUSED.items()):
        hosts[host] = {**store_a, "ansible_host": f"10.0.1.{i + 11}",
                       **{k: v for k, v in over.items() if k != "dhchap"}}
    for host in hosts:
        dhchap = REFUSED[host][0].get("dhchap", DHCHAP) if host in REFUSED else DHCHAP
        (tmp / "host_vars" / f"{host}.yml").write_text(_dhchap_vars(tools, tmp, dhchap))
    inv["all"]["vars"].update({"ansible_connection": "local",
                               "ansible_python_interpreter": sys.executable})
    inv["all"]["children"] = {"storage": {"hosts": hosts}}
    (tmp / "inventory.yml").write_text(yaml.safe_dump(inv))
    (tmp / "secrets.yml").write_text(
        "awide_etcd_passwords:\n"
        + _vaulted(tools, tmp, ETCD_PASSWORD, '  "host:prod1:store-a"')
        + _vaulted(tools, tmp, ETCDCTL_PASSWORD, '  "root"'))
    play = [{"name": "Check the inventory", "hosts": "storage", "gather_facts": False,
             "tasks": [{"name": "Checks", "ansible.builtin.import_role": {
                 "name": "awide", "tasks_from": "checks.yml"}}]}]
    (tmp / "checks.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    r = _run([str(tools / "ansible-playbook"), "-i", "inventory.yml", "-e", "@secrets.yml",
              "--vault-password-file", "vault-pw", "--check", "checks.yml"], cwd=tmp,
             ANSIBLE_ROLES_PATH=str(ANSIBLE / "roles"), ANSIBLE_CALLBACK_RESULT_FORMAT="json",
             ANSIBLE_CALLBACK_FORMAT_PRETTY="false")
    return {"run": r, "recap": _recap(r.stdout)}


def _recap(stdout: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP lines: {host: {"ok": n, "changed": n, "failed": n, ...}}."""
    recap: dict[str, dict[str, int]] = {}
    for m in re.finditer(r"^(\S+)\s+: ((?:\w+=\d+\s*)+)$", stdout, re.M):
        recap[m.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
    return recap


def test_the_inventory_checks_pass_a_good_host(refusals: dict) -> None:
    r = refusals["run"]
    assert r.returncode != 0                       # the refused hosts
    assert refusals["recap"]["store-a"]["failed"] == 0, _text(r)[-4000:]
    assert not any(secret in _text(r) for secret in SECRETS)
    assert "not-a-key-3f9a" not in _text(r)


@pytest.mark.parametrize("host", sorted(REFUSED))
def test_the_inventory_checks_refuse_bad_access_settings(refusals: dict, host: str) -> None:
    r = refusals["run"]
    assert refusals["recap"][host]["failed"] == 1, _text(r)[-4000:]
    said = "\n".join(line for line in r.stdout.splitlines()
                     if re.match(r"(fatal|failed): \[" + re.escape(host) + r"\]", line))
    assert REFUSED[host][1] in said, (host, said, _text(r)[-3000:])
    assert not any(secret in _text(r) for secret in SECRETS)
    assert "not-a-key-3f9a" not in _text(r)


# --- the role's NQN rule is the gateway library's (pure) ------------------------------------

def _role_nqn_pattern() -> re.Pattern[str]:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    pattern = defaults["awide_nqn_pattern"].replace("{{ awide_nqn_label }}",
                                                     defaults["awide_nqn_label"])
    assert "{{" not in pattern
    return re.compile(pattern)


@settings(max_examples=300, deadline=None)
@example(date="2024-01", domain="io.awide", name="gw\n", extra="")
@example(date="2024-01", domain="io.awide", name="gw\nAWIDE_INSECURE_ANY_HOST=yes", extra="")
@given(date=st.sampled_from(["2024-01", "2014-08", "2024-12", "2024-13", "2024-00", "24-01"]),
       domain=st.lists(st.sampled_from(["io", "awide", "a-b", "x1", "7", "-a", "a-", "", "a_b",
                                        "A"]), min_size=1, max_size=3).map(".".join),
       name=st.one_of(st.text("abXY09.-_:@+", min_size=1, max_size=6),
                      st.text("abc019.-_:@+,=/ \n", min_size=0, max_size=6)),
       extra=st.sampled_from(["", "x" * 220]))
def test_the_role_accepts_exactly_the_nqns_the_library_accepts(date: str, domain: str,
                                                                name: str, extra: str) -> None:
    nqn = f"nqn.{date}.{domain}:{name}{extra}"
    try:
        validate_nqn(nqn)
        library = True
    except InvalidTarget:
        library = False
    # ansible's `match` test is re.match
    assert (_role_nqn_pattern().match(nqn) is not None) == library, nqn
