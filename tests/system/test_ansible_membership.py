"""The playbooks of ansible/ pass `--syntax-check`, and the membership changes (add-host.yml,
remove-host.yml, replace-host.yml) and restore.yml refuse on the controller, before any host is
touched: the quorum arithmetic, the live membership's checks and the restore's confirmation.
These start no etcd and no daemon (`make test` runs them beside the fast tests); the render is
test_ansible.py, the parts that ask a real etcd test_ansible_etcd.py.

ansible-core comes with the test extra; without it the tests skip, saying so.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.system.ansible_support import (
    ANSIBLE,
    _play,
    _recap,
    _run,
    ansible_tools,  # noqa: F401 (a fixture)
)

pytestmark = pytest.mark.timeout(600)


def test_playbooks_pass_syntax_check(ansible_tools: Path) -> None:
    r = _run([str(ansible_tools / "ansible-playbook"), "-i", "inventory.example.yml",
              "--syntax-check", "site.yml", "upgrade.yml", "backup.yml", "restore.yml",
              "rotate-certs.yml", "add-host.yml", "remove-host.yml", "replace-host.yml"],
             cwd=ANSIBLE)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "playbook: site.yml" in r.stdout and "playbook: upgrade.yml" in r.stdout
    assert "playbook: backup.yml" in r.stdout and "playbook: restore.yml" in r.stdout
    for name in ("add-host.yml", "remove-host.yml", "replace-host.yml"):
        assert f"playbook: {name}" in r.stdout


def _inventory(tmp: Path, hosts: list[str]) -> Path:
    """hosts (storage) at addresses nothing answers on: a run that got past the local check
    would fail to reach them."""
    inv = {"all": {"vars": {"awide_cluster_name": "t1"},
                   "children": {"storage": {"hosts": {
                       h: {"ansible_host": f"192.0.2.{i + 1}"} for i, h in enumerate(hosts)}}}}}
    path = tmp / "inventory.yml"
    path.write_text(yaml.safe_dump(inv))
    return path


@pytest.mark.parametrize(("playbook", "hosts", "extra", "why"), [
    # 3 voting members: removing one leaves 2
    ("remove-host.yml", ["h1", "h2", "h3"], {"awide_remove_host": "h3"}, "after 2"),
    # the host to remove is not in the inventory
    ("remove-host.yml", ["h1", "h2", "h3", "h4"], {"awide_remove_host": "h9"}, "leaving host h9"),
    # nothing named
    ("add-host.yml", ["h1", "h2", "h3", "h4"], {}, "new host -"),
    # the new host must be in the inventory already
    ("add-host.yml", ["h1", "h2", "h3"], {"awide_new_host": "h4"}, "new host h4"),
    # the cluster it would join has only 2 members
    ("add-host.yml", ["h1", "h2", "h3"], {"awide_new_host": "h3"}, "before 2"),
    # 2 members + the new one: 2 before, 2 after
    ("replace-host.yml", ["h1", "h2", "h3"],
     {"awide_new_host": "h3", "awide_remove_host": "h2"}, "after 2"),
    ("replace-host.yml", ["h1", "h2", "h3", "h4"], {"awide_new_host": "h4"},
     "awide_remove_host=<failed host>"),
    ("replace-host.yml", ["h1", "h2", "h3", "h4"],
     {"awide_new_host": "h4", "awide_remove_host": "h4"}, "leaving host h4"),
])
def test_membership_changes_are_refused_before_any_host_is_touched(
        ansible_tools: Path, tmp_path: Path, playbook: str, hosts: list[str],
        extra: dict[str, str], why: str) -> None:
    """The refusal is computed on the controller from the inventory: the hosts' addresses
    answer nothing, so any step that touched a host would fail with unreachable instead."""
    inventory = _inventory(tmp_path, hosts)
    argv = [str(ansible_tools / "ansible-playbook"), "-i", str(inventory),
            str(ANSIBLE / playbook)]
    for k, v in extra.items():
        argv += ["-e", f"{k}={v}"]
    r = _run(argv, cwd=ANSIBLE)
    assert r.returncode != 0
    assert "refused, nothing was changed" in r.stdout, r.stdout[-3000:]
    assert why in r.stdout, r.stdout[-3000:]
    recap = _recap(r.stdout)
    assert set(recap) == {"localhost"}, recap          # no host was reached
    assert "UNREACHABLE" not in r.stdout


QUORUM_CASES = [
    (["h1", "h2", "h3", "h4"], "h4", "", True),        # add a 4th
    (["h1", "h2", "h3", "h4"], "", "h4", True),        # remove it again
    (["h1", "h2", "h3", "h4"], "h4", "h3", True),      # replace h3 by h4: 3, 2, 3 voters
    (["h1", "h2", "h3"], "", "h3", False),             # 2 would remain
    (["h1", "h2", "h3", "h4", "h5"], "h5", "h4", True),
    (["h1", "h2", "h3"], "h3", "h2", False),           # 2, 1, 2
]


def _refusal(stdout: str, host: str) -> str:
    """What the failed tasks of host said (default callback, result format json)."""
    return "\n".join(line for line in stdout.splitlines()
                     if re.match(r"(fatal|failed): \[" + re.escape(host) + r"\]", line))


@pytest.fixture(scope="module")
def quorum_checks(ansible_tools: Path, tmp_path_factory: pytest.TempPathFactory) -> \
        subprocess.CompletedProcess[str]:
    """The role's membership check alone, run once on localhost as one host per case of
    QUORUM_CASES (q0, q1, ...: each decides on its own host variables)."""
    hosts = {f"q{i}": {"ansible_host": "127.0.0.1", "awide_hosts": hosts, "awide_new_host": new,
                       "awide_remove_host": remove, "awide_membership_usage": "usage"}
             for i, (hosts, new, remove, _) in enumerate(QUORUM_CASES)}
    return _play(tmp_path_factory.mktemp("quorum"), ansible_tools, "membership_check.yml", {},
                 hosts)


@pytest.mark.parametrize(("hosts", "new", "remove", "allowed"), QUORUM_CASES)
def test_the_quorum_arithmetic_of_membership_changes(quorum_checks: subprocess.CompletedProcess,
                                                     hosts: list[str], new: str, remove: str,
                                                     allowed: bool) -> None:
    """Allowed exactly when at least 3 voting members are there before and after the change."""
    host = f"q{QUORUM_CASES.index((hosts, new, remove, allowed))}"
    r = quorum_checks
    assert _recap(r.stdout)[host]["failed"] == (0 if allowed else 1), r.stdout[-3000:]
    if not allowed:
        assert "refused, nothing was changed" in _refusal(r.stdout, host), r.stdout[-3000:]


def _member(name: str, addr: str, learner: bool = False) -> dict[str, object]:
    return {"id": f"{sum(map(ord, name + addr)):x}", "name": name,
            "peer": f"https://{addr}:2380", "client": f"https://{addr}:2379" if name else "",
            "learner": learner}


H1, H2, H3 = (_member(f"h{i}", f"192.0.2.{i}") for i in (1, 2, 3))
REPLACE_CASES = [
    # h3 failed, h1 and h2 healthy: allowed
    ([H1, H2, H3], False, ["h1", "h2"], None),
    # a rerun after h3's member was removed: allowed (the new one joins)
    ([H1, H2], False, ["h1", "h2"], None),
    # h3 still answers: not failed
    ([H1, H2, H3], True, ["h1", "h2"], "still answers"),
    # h2 not healthy: h1 alone would be left
    ([H1, H2, H3], False, ["h1"], "not healthy: h2"),
    # only 2 voters: removing h3 leaves 1
    ([H1, H3], False, ["h1"], "would have 1 voting members (h1)"),
    # the new host is already a learner (added, never started: no name yet)
    ([H1, H2, H3, _member("", "192.0.2.4", learner=True)], False, ["h1", "h2"],
     "h4 is already an etcd member"),
]


@pytest.fixture(scope="module")
def replace_checks(ansible_tools: Path, tmp_path_factory: pytest.TempPathFactory) -> \
        subprocess.CompletedProcess[str]:
    """The role's check of etcd's live membership for replace-host.yml, run once on localhost
    as one host per case of REPLACE_CASES (r0, r1, ...: what the playbook asked etcd given as
    its host variables): h3 is replaced by h4."""
    hosts = {f"r{i}": {"ansible_host": "127.0.0.1", "awide_etcd_members": members,
                       "awide_failed_answers": answers, "awide_healthy_voters": healthy}
             for i, (members, answers, healthy, _) in enumerate(REPLACE_CASES)}
    return _play(tmp_path_factory.mktemp("replace"), ansible_tools, "replace_check.yml",
                 {"awide_new_host": "h4", "awide_remove_host": "h3",
                  "awide_leaving_peer": "https://192.0.2.3:2380",
                  "awide_joining_peer": "https://192.0.2.4:2380"}, hosts)


@pytest.mark.parametrize(("members", "answers", "healthy", "why"), REPLACE_CASES)
def test_a_replacement_is_refused_by_the_live_membership(
        replace_checks: subprocess.CompletedProcess, members: list[dict], answers: bool,
        healthy: list[str], why: str | None) -> None:
    host = f"r{REPLACE_CASES.index((members, answers, healthy, why))}"
    r = replace_checks
    if why is None:
        assert _recap(r.stdout)[host]["failed"] == 0, r.stdout[-3000:]
        return
    assert _recap(r.stdout)[host]["failed"] == 1, r.stdout[-3000:]
    said = _refusal(r.stdout, host)
    assert "refused, nothing was changed" in said and why in said, (said, r.stdout[-3000:])


def test_restore_refuses_without_the_cluster_named(ansible_tools: Path) -> None:
    """The wipe is refused unless the cluster is named and exactly one source given: checked
    before any member is touched (the assert runs against the example inventory's hosts,
    which are never reached: the first task is local)."""
    text = (ANSIBLE / "restore.yml").read_text()
    tasks = yaml.safe_load(text)[0]["tasks"]
    names = [t["name"] for t in tasks]
    check = names.index("Check the request (one source, and the cluster named to confirm "
                        "the wipe)")
    assert check < names.index("Stop etcd on every member")
    assert "awide_restore_confirm == awide_cluster_name" in tasks[check][
        "ansible.builtin.assert"]["that"]
    # the old data is moved aside, never deleted; the new cluster gets a new token
    assert "rm -rf" not in text and 'argv: [mv, "{{ awide_etcd_data_dir }}"' in text
    assert "--initial-cluster-token={{ awide_restore_token }}" in text
