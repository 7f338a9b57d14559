"""The role's NVMe-oF access and secrets, for the example inventory: rendered with
``ansible-playbook --check --diff`` (what an operator sees before a rollout) and then for real
into a temp dir, with secrets given as ansible-vault values. The diff shows the cards' env files
with their allow-lists and no ``allow_any_host``, and no secret value appears in any output; the
secret files are written with their modes; a renewal issues new certificates from the same CA.
The loud opt-outs and the inventory checks' refusals are test_ansible_access_checks.py (a file
of its own, so that `make test` runs the two side by side); what both share is
ansible_secrets_support.py.

ansible-core comes with the test extra; without it the tests skip, saying so.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.system.ansible_secrets_support import (
    DHCHAP,
    ETCD_PASSWORD,
    ETCDCTL_PASSWORD,
    ROOT,
    SECRETS,
    _playbook,
    _setup,
    _text,
    tools,  # noqa: F401 (a fixture)
    tools_dir,
)

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def runs(tools: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    s = _setup(tools, tmp_path_factory.mktemp("ansible-secrets"))
    check = _playbook(tools, s, "--check", "--diff")
    real = _playbook(tools, s, "--diff", "-v")
    return {**s, "check": check, "real": real}


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
    # the checks and the TLS tasks of the render (the others do not touch certificates), for
    # the host whose certificate is compared (each host's are issued alike)
    r = _playbook(tools_dir(), runs, "-e", "awide_tls_renew=true", "--diff", "--limit",
                  "store-a", playbook="tls.yml")
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
