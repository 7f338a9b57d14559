"""ansible/ passes `ansible-lint` (production profile), and the role's real config tasks, run
against localhost into a temp dir, write cluster.yaml files that `awide-cluster check-config`
accepts, refuse a bad one before it is written (the template task's `validate:`) and label dir
cards once. These start no etcd and no daemon (`make test` runs them beside the fast tests);
the playbooks' syntax check and the membership changes' refusals are
test_ansible_membership.py, the etcd flags the real etcd recognises and the parts of the role
that ask a real etcd test_ansible_etcd.py; what they share is ansible_support.py.

ansible-core and ansible-lint come with the test extra; without them the tests skip, saying so.
The full rollout over SSH into systemd containers is tests/system/test_nspawn.py (opt-in,
minutes).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from awide_cluster.cards.directory import read_label
from tests.system.ansible_support import (
    ANSIBLE,
    BIN,
    ROLE,
    ROOT,
    _env,
    _env_file,
    _failure,
    _play,
    _recap,
    _render,
    _run,
    ansible_tools,  # noqa: F401 (a fixture)
    target_python,
)

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module", autouse=True)
def lint_run(ansible_tools: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """ansible-lint started once in the background, so that it overlaps the render below."""
    log = tmp_path_factory.mktemp("ansible-lint") / "lint.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(ansible_tools / "ansible-lint"), "--offline", "--nocolor",
                                 "--profile", "production", "ansible/"], cwd=ROOT, env=_env(),
                                stdout=out, stderr=subprocess.STDOUT)
    state = {"proc": proc, "log": log}
    yield state
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


def test_example_inventory_has_the_groups_and_cards() -> None:
    inv = yaml.safe_load((ANSIBLE / "inventory.example.yml").read_text())
    groups = inv["all"]["children"]
    assert set(groups) == {"storage", "witness"}
    hosts = {**groups["storage"]["hosts"], **groups["witness"]["hosts"]}
    assert len(hosts) >= 3                       # an etcd quorum
    assert all(h.get("awide_cards") for h in groups["storage"]["hosts"].values())
    assert not any(h.get("awide_cards") for h in groups["witness"]["hosts"].values())


def test_the_progress_notify_interval_is_one_duration_set_in_one_place(
        ansible_tools: Path, tmp_path: Path) -> None:
    """The role's checks, for real against localhost: h1's interval is a Go duration of one
    unit (passes), h2's has a space, h3 sets the daemons' field through awide_timing, which
    could disagree with etcd's flag: both refused, naming the variable."""
    host = {"ansible_connection": "local", "ansible_python_interpreter": target_python()}
    inventory = {"all": {"vars": {"awide_cluster_name": "t1"}, "children": {"storage": {
        "hosts": {"h1": {**host, "awide_etcd_progress_notify": "1500ms"},
                  "h2": {**host, "awide_etcd_progress_notify": "10 s"},
                  "h3": {**host, "awide_timing": {"etcd_progress_notify": 1}}}}}}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    playbook = [{"name": "Checks", "hosts": "storage", "gather_facts": False, "tasks": [
        {"name": "Checks", "ansible.builtin.import_role": {"name": "awide",
                                                           "tasks_from": "checks.yml"}}]}]
    (tmp_path / "checks.yml").write_text(yaml.safe_dump(playbook, sort_keys=False))
    r = _run([str(ansible_tools / "ansible-playbook"), "-i", "inventory.yml", "checks.yml"],
             cwd=tmp_path, ANSIBLE_ROLES_PATH=str(ANSIBLE / "roles"),
             ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_CALLBACK_FORMAT_PRETTY="false")
    assert {h: s["failed"] for h, s in _recap(r.stdout).items()} == \
        {"h1": 0, "h2": 1, "h3": 1}, r.stdout[-4000:]
    for bad in ("h2", "h3"):
        res = _failure(r.stdout, "Check the etcd progress-notification interval", bad)
        assert "awide_etcd_progress_notify" in res["msg"], res


# --- the config tasks, for real, against localhost ------------------------------------------

@pytest.fixture(scope="module")
def rendered(ansible_tools: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The role's render tasks run for real for four hosts: s1, s2 (storage, one dir card
    each; s2 on IPv6), w1 (a witness) and w2 (a witness wrongly given a card, whose old
    cluster.yaml must survive the refused render)."""
    return _render(ansible_tools, tmp_path_factory.mktemp("ansible-render"))


def test_only_the_bad_host_failed(rendered: dict) -> None:
    recap = _recap(rendered["stdout"])
    assert rendered["rc"] != 0
    assert {h: s["failed"] for h, s in recap.items()} == {"s1": 0, "s2": 0, "w1": 0, "w2": 1}, \
        rendered["stdout"][-4000:]


def test_rendered_configs_pass_check_config(rendered: dict) -> None:
    for host, role, ncards in (("s1", "storage", 1), ("s2", "storage", 1), ("w1", "witness", 0)):
        path = rendered["out"] / host / "cluster.yaml"
        r = subprocess.run([str(BIN / "awide-cluster"), "check-config", str(path)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert f"host {host}, {role}, {ncards} card(s)" in r.stdout
        # TLS and the host's own etcd user by default: no plaintext warning
        assert "WARNING" not in r.stderr, r.stderr
        cfg = yaml.safe_load(path.read_text())
        assert cfg["cluster"] == "t1" and cfg["dev_cluster"] is False
        assert "allow_plaintext" not in cfg["etcd"]
        assert cfg["etcd"]["endpoints"] == ["https://10.9.0.11:2379", "https://[fd00::12]:2379",
                                            "https://10.9.0.13:2379", "https://10.9.0.14:2379"]
        assert cfg["etcd"]["tls"] == {"ca_file": str(rendered["out"] / host / "tls" / "ca.crt")}
        assert cfg["etcd"]["username"] == f"host:t1:{host}"
        pw = Path(cfg["etcd"]["password_file"])
        assert pw.stat().st_mode & 0o777 == 0o640
        # the generated password, kept on the controller (0600) and reused
        kept = rendered["tmp"] / "secrets" / f"host:t1:{host}"
        assert kept.stat().st_mode & 0o777 == 0o600
        assert pw.read_text().strip() == kept.read_text().strip()
        assert len(kept.read_text().strip()) == 32
        for card in cfg["cards"]:
            assert "label" not in card                 # inventory-only keys stay out


def test_a_config_check_config_refuses_is_never_written(rendered: dict) -> None:
    res = _failure(rendered["stdout"], "Write and check cluster.yaml", "w2")
    assert res["msg"] == "failed to validate" and res["exit_status"] == 78, res
    assert "cards" in res["stderr"], res                  # check-config names the field
    assert (rendered["out"] / "w2" / "cluster.yaml").read_text() == rendered["old_w2"]


def test_dir_cards_are_labelled_once_and_writable_by_the_daemon(rendered: dict) -> None:
    s1 = read_label(rendered["cards"] / "s1" / "dev0")
    assert (s1.serial, s1.model) == ("SER-S1-DEV0", "test-dir")
    s2 = read_label(rendered["cards"] / "s2" / "dev0")
    assert (s2.serial, s2.model) == ("s2-dev0", "awide-directory-card")
    assert s1.uuid != s2.uuid
    dropin = (rendered["out"] / "s1" / "units" / "awide-cluster.service.d" / "10-cards.conf")
    assert f"ReadWritePaths={rendered['cards'] / 's1' / 'dev0'}" in dropin.read_text()
    assert not (rendered["out"] / "w1" / "units" / "awide-cluster.service.d"
                / "10-cards.conf").exists()


def test_the_alert_rules_and_the_dashboard_are_installed(rendered: dict) -> None:
    for host in ("s1", "s2", "w1"):
        got = rendered["out"] / host / "monitoring"
        for name in ("alerts.yml", "alerts.test.yml", "dashboard.json"):
            assert (got / name).read_bytes() == (ROOT / "monitoring" / name).read_bytes(), \
                f"{host}: {name}"
            assert (got / name).stat().st_mode & 0o777 == 0o644


def test_etcd_flags_name_every_member(rendered: dict) -> None:
    env = _env_file(rendered["out"] / "s2" / "etcd.env")
    assert env["ETCD_NAME"] == "s2"
    assert env["ETCD_INITIAL_CLUSTER"] == ("s1=https://10.9.0.11:2380,s2=https://[fd00::12]:2380,"
                                           "w1=https://10.9.0.13:2380,w2=https://10.9.0.14:2380")
    assert env["ETCD_LISTEN_CLIENT_URLS"] == "https://[fd00::12]:2379,https://127.0.0.1:2379"
    tls = rendered["out"] / "s2" / "tls"
    assert env["ETCD_PEER_CLIENT_CERT_AUTH"] == "true"
    assert env["ETCD_PEER_TRUSTED_CA_FILE"] == str(tls / "ca.crt")
    assert env["ETCD_CERT_FILE"] == env["ETCD_PEER_CERT_FILE"] == str(tls / "etcd.crt")
    assert env["ETCD_KEY_FILE"] == env["ETCD_PEER_KEY_FILE"] == str(tls / "etcd.key")
    # no client certificates demanded on the client port (etcd's JSON gateway would refuse
    # every request with auth on)
    assert "ETCD_CLIENT_CERT_AUTH" not in env and "ETCD_TRUSTED_CA_FILE" not in env
    assert env["ETCD_PRE_VOTE"] == "true"


def test_the_daemons_and_etcd_are_given_one_progress_notify_interval(rendered: dict) -> None:
    """etcd.env and cluster.yaml are written from one variable (default 1400ms; s1 is given
    1500ms): the daemon's idle leader-key watch waits for three of etcd's notifications."""
    for host, flag, seconds in (("s1", "1500ms", 1.5), ("s2", "1400ms", 1.4),
                                ("w1", "1400ms", 1.4)):
        env = _env_file(rendered["out"] / host / "etcd.env")
        assert env["ETCD_EXPERIMENTAL_WATCH_PROGRESS_NOTIFY_INTERVAL"] == flag, host
        cfg = yaml.safe_load((rendered["out"] / host / "cluster.yaml").read_text())
        assert cfg["timing"] == {"etcd_progress_notify": seconds}, host


def test_etcd_flags_compact_history_and_set_the_quota(rendered: dict) -> None:
    for host in ("s1", "s2", "w1"):
        env = _env_file(rendered["out"] / host / "etcd.env")
        assert env["ETCD_AUTO_COMPACTION_MODE"] == "periodic"
        assert env["ETCD_AUTO_COMPACTION_RETENTION"] == "1h"
        assert env["ETCD_QUOTA_BACKEND_BYTES"] == str(2 * 1024**3)


def test_etcdctl_of_the_housekeeping_units_reaches_this_member_only(rendered: dict) -> None:
    path = rendered["out"] / "s2" / "etcdctl.env"
    assert path.stat().st_mode & 0o777 == 0o600
    env = _env_file(path)
    assert env["ETCDCTL_ENDPOINTS"] == "https://[fd00::12]:2379"
    assert env["ETCDCTL_CACERT"] == str(rendered["out"] / "s2" / "tls" / "ca.crt")
    root_pw = (rendered["tmp"] / "secrets" / "root").read_text().strip()
    assert env["ETCDCTL_USER"] == f"root:{root_pw}"   # snapshots and defrag are root's
    assert env["ETCDCTL_API"] == "3"
    assert env["AWIDE_BACKUP_DIR"] == "/var/lib/awide-etcd-backup"
    assert env["AWIDE_BACKUP_KEEP_DAYS"] == "7" and env["AWIDE_BACKUP_NAME"] == "s2"


def _dropin(rendered: dict, host: str, unit: str) -> str:
    return (rendered["out"] / host / "units" / f"{unit}.d" / "10-awide.conf").read_text()


def test_members_are_defragmented_one_at_a_time(rendered: dict) -> None:
    times = {}
    for host in ("s1", "s2", "w1"):
        text = _dropin(rendered, host, "awide-etcd-defrag.timer")
        # the unit's OnCalendar is reset, then this host's own time
        assert re.search(r"^OnCalendar=$", text, re.M), text
        times[host] = re.findall(r"^OnCalendar=\*-\*-\* (\d\d:\d\d):00$", text, re.M)
    assert times == {"s1": ["03:00"], "s2": ["03:15"], "w1": ["03:30"]}
    service = _dropin(rendered, "s1", "awide-etcd-defrag.service")
    assert "Environment=ETCDCTL_COMMAND_TIMEOUT=300s" in service
    assert "TimeoutStartSec=330" in service          # within the 15 min between two members


def test_backups_are_daily_and_bounded(rendered: dict) -> None:
    timer = _dropin(rendered, "w1", "awide-etcd-backup.timer")
    assert re.findall(r"^OnCalendar=(.*)$", timer, re.M) == ["", "*-*-* 02:30:00"]
    service = _dropin(rendered, "w1", "awide-etcd-backup.service")
    assert "Environment=ETCDCTL_COMMAND_TIMEOUT=600s" in service
    assert "TimeoutStartSec=660" in service
    assert "ReadWritePaths" not in service            # the unit's own StateDirectory


HOUSEKEEPING_UNITS = ("awide-etcd-defrag.service", "awide-etcd-defrag.timer",
                      "awide-etcd-backup.service", "awide-etcd-backup.timer")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze not installed")
@pytest.mark.parametrize("host", ["s1", "w1"])
def test_housekeeping_units_with_their_rendered_dropins_verify(rendered: dict, tmp_path: Path,
                                                               host: str) -> None:
    """The role's drop-ins beside the units, as on a host: systemd-analyze verify reads both
    and says nothing (a bad calendar or key would be named)."""
    true = shutil.which("true")
    assert true is not None
    etcd_unit = (ROOT / "systemd" / "awide-etcd.service").read_text()
    (tmp_path / "awide-etcd.service").write_text(etcd_unit.replace("/usr/bin/etcd", true))
    for name in HOUSEKEEPING_UNITS:
        text = (ROOT / "systemd" / name).read_text()
        for prog in ("/usr/local/bin/awide-etcd-backup", "/usr/bin/etcdctl"):
            text = text.replace(prog, true)
        (tmp_path / name).write_text(text)
        shutil.copytree(rendered["out"] / host / "units" / f"{name}.d", tmp_path / f"{name}.d")
    r = subprocess.run(["systemd-analyze", "verify", "--man=no",
                        *(str(tmp_path / n) for n in HOUSEKEEPING_UNITS)],
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "SYSTEMD_LOG_LEVEL": "warning"})
    noise = [line for line in r.stderr.splitlines() if "awide" in line or "Unknown" in line
             or "Failed" in line or "Invalid" in line]
    assert r.returncode == 0 and not noise, r.stderr


# --- what the units point at, and the upgrade's refusal -------------------------------------

def _documentation_files() -> dict[str, list[str]]:
    """unit file -> the local paths its Documentation= lines name (file:// URLs)."""
    found: dict[str, list[str]] = {}
    for unit in sorted((ROOT / "systemd").iterdir()):
        for line in unit.read_text().splitlines() if unit.is_file() else ():
            if line.startswith("Documentation="):
                for url in line.partition("=")[2].split():
                    if url.startswith("file://"):
                        found.setdefault(unit.name, []).append(url[len("file://"):])
    return found


def test_every_documentation_path_of_every_unit_is_installed_by_the_role(
        ansible_tools: Path, tmp_path: Path) -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    doc_dir = defaults["awide_doc_dir"]
    named = _documentation_files()
    assert named, "no unit names a local documentation file"
    out = tmp_path / "doc"
    r = _play(tmp_path, ansible_tools, "docs.yml", {"awide_doc_dir": str(out),
                                                "awide_docs_src": str(ROOT / "docs")},
              {"s1": {"ansible_host": "127.0.0.1"}})
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr
    for unit, paths in named.items():
        for path in paths:
            assert path.startswith(doc_dir + "/"), \
                f"{unit}: Documentation={path} is not under the role's {doc_dir}"
            installed = out / path[len(doc_dir) + 1:]
            assert installed.is_file(), f"{unit}: {path} is not installed by the role"
            assert installed.read_bytes() == (ROOT / "docs" / installed.name).read_bytes()


# last, so that the background lint overlaps the render above
def test_ansible_lint_is_clean_at_the_production_profile(lint_run: dict) -> None:
    try:
        rc = lint_run["proc"].wait(timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail("ansible-lint did not finish within 300 s")
    out = lint_run["log"].read_text()
    assert rc == 0, out
    assert "0 failure(s), 0 warning(s)" in out, out
