"""The parts of the awide role's tests against localhost that start a real etcd (`make test`
runs them alone, after the fast tests): etcd recognises every flag the role writes, the
upgrade's refusal names every problem of a long status, and the member list is read as etcd
gives it. The render and the checks are test_ansible.py; what both share is
ansible_support.py.

ansible-core comes with the test extra; without it the tests skip, saying so.
"""

from __future__ import annotations

import json
import re
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from awide_harness.ports import reserve_port
from tests.system.ansible_support import (
    BIN,
    RENDER,
    _env_file,
    _etcd_programs,
    _failure,
    _handlers_are_stubbed,
    _play,
    _render,
    _run,
    ansible_tools,  # noqa: F401 (a fixture)
    target_python,
)

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def flags(ansible_tools: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """s1's certificate and etcd flags as test_ansible.py's render writes them (the same
    inventory and tasks files, for s1 alone)."""
    r = _render(ansible_tools, tmp_path_factory.mktemp("ansible-flags"),
                tuple(t for t in RENDER if t[1] in ("tls.yml", "etcd_env.yml")),
                ("--limit", "s1"))
    assert r["rc"] == 0, r["stdout"][-4000:] + r["stderr"]
    return r


@pytest.mark.parametrize("which", [0, 1])
def test_etcd_recognises_every_flag_we_write(flags: dict, tmp_path: Path, which: int) -> None:
    """Start the real etcd (Debian 3.4.23 and the venv's 3.5.1) with the written flags, moved to
    loopback as a one-member cluster: it must use every ETCD_* variable, serve TLS with the
    role's certificate and become healthy."""
    programs = _etcd_programs()
    if which >= len(programs):
        pytest.skip("only one etcd program here")
    env = _env_file(flags["out"] / "s1" / "etcd.env")
    client, peer = reserve_port(), reserve_port()
    env.update({"ETCD_DATA_DIR": str(tmp_path / "data"),
                "ETCD_LISTEN_CLIENT_URLS": f"https://127.0.0.1:{client}",
                "ETCD_ADVERTISE_CLIENT_URLS": f"https://127.0.0.1:{client}",
                "ETCD_LISTEN_PEER_URLS": f"https://127.0.0.1:{peer}",
                "ETCD_INITIAL_ADVERTISE_PEER_URLS": f"https://127.0.0.1:{peer}",
                "ETCD_INITIAL_CLUSTER": f"s1=https://127.0.0.1:{peer}"})
    # the host's rendered certificate (SAN 127.0.0.1), checked against the rendered CA
    ctx = ssl.create_default_context(cafile=str(flags["out"] / "s1" / "tls" / "ca.crt"))
    log = tmp_path / "etcd.log"
    with open(log, "w") as f:
        proc = subprocess.Popen([programs[which]], env={"PATH": "/usr/bin:/bin", **env},
                                stdout=f, stderr=subprocess.STDOUT)
    try:
        healthy = False
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{client}/health", timeout=1,
                                            context=ctx) as r:
                    healthy = json.load(r).get("health") == "true"
            except OSError:
                pass
            if healthy:
                break
            time.sleep(0.2)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    text = log.read_text()
    assert healthy, text[-3000:]
    assert "unrecognized environment variable" not in text, text[-3000:]
    assert set(env) <= _used_variables(text), (set(env) - _used_variables(text), text[-3000:])


def _used_variables(log: str) -> set[str]:
    """ETCD_* names etcd says it used: 3.4 logs text lines, 3.5 JSON lines."""
    used = set(re.findall(r"recognized and used environment variable (ETCD_\w+)=", log))
    for line in log.splitlines():
        if line.startswith("{") and "recognized and used environment variable" in line:
            used.add(json.loads(line).get("variable-name", ""))
    return used


def test_upgrade_refusal_shows_every_problem_line(ansible_tools: Path, etcd3,
                                                  tmp_path: Path) -> None:
    """A cluster whose status is long (40 hosts' reports refused, no leader): the refusal
    names every one of them, well past 2,000 characters."""
    import asyncio

    from awide_cluster.store.config import StoreConfig
    from awide_cluster.store.etcd import EtcdStore

    hosts = [f"h{i:02d}" for i in range(40)]
    config = tmp_path / "etc" / "cluster.yaml"
    config.parent.mkdir()
    config.write_text(yaml.safe_dump({
        "cluster": "t1", "host": "h00", "hosts": hosts,
        "etcd": {"endpoints": list(etcd3.endpoints), "call_timeout": 0.5}}))

    async def garbage() -> None:
        async with EtcdStore(StoreConfig(endpoints=tuple(etcd3.endpoints),
                                         prefix="/awide/t1/")) as store:
            for h in hosts:
                await store.put(f"members/{h}", b"{not json at all " + h.encode(), timeout=2)

    asyncio.run(garbage())
    r = _play(tmp_path, ansible_tools, "upgrade_plan.yml",
              {"awide_bin": str(BIN / "awide-cluster"), "awide_config_dir": str(config.parent)},
              {"h00": {"ansible_host": "127.0.0.1"}})
    assert r.returncode != 0
    msg = _failure(r.stdout, "Refuse to upgrade an unhealthy cluster", "h00")["msg"]
    assert len(msg) > 2000
    assert "nothing was changed" in msg and "status exit 2" in msg
    for h in hosts:
        assert f"error report_corrupt {h}: report of host {h} refused" in msg, (h, msg)
    assert "no_leader" in msg


def test_the_member_list_is_read_as_etcd_gives_it(ansible_tools: Path, tmp_path: Path) -> None:
    """The role's etcd_members.yml against a real etcd (one member, loopback, plain http) with
    a learner added: every member, its peer and client URL, whether it is a learner, and its
    id in the hex form that `etcdctl member promote/remove` take."""
    program = _etcd_programs()[0]
    client, peer = reserve_port(), reserve_port()
    log = tmp_path / "etcd.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(
            [program, "--name", "m1", "--data-dir", str(tmp_path / "data"),
             "--listen-client-urls", f"http://127.0.0.1:{client}",
             "--advertise-client-urls", f"http://127.0.0.1:{client}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"m1=http://127.0.0.1:{peer}"],
            stdout=f, stderr=subprocess.STDOUT)
    try:
        etcdctl = [str(BIN / "etcdctl") if (BIN / "etcdctl").exists() else "etcdctl",
                   f"--endpoints=http://127.0.0.1:{client}"]
        deadline = time.monotonic() + 30
        while True:
            r = subprocess.run([*etcdctl, "member", "add", "m2", "--learner",
                                "--peer-urls=http://127.0.0.1:1"], capture_output=True,
                               text=True, timeout=30)
            if r.returncode == 0 or time.monotonic() > deadline or proc.poll() is not None:
                break
            time.sleep(0.2)
        assert r.returncode == 0, r.stderr + log.read_text()[-2000:]
        simple = subprocess.run([*etcdctl, "member", "list"], capture_output=True, text=True,
                                timeout=30, check=True).stdout
        expected = sorted((line.split(", ")[0], line.split(", ")[3], line.split(", ")[5] == "true")
                          for line in simple.splitlines() if line)
        roles = _handlers_are_stubbed(tmp_path)
        out = tmp_path / "members.json"
        inventory = {"all": {"vars": {"awide_cluster_name": "t1", "ansible_connection": "local",
                                      "ansible_python_interpreter": target_python()},
                             "children": {"storage": {"hosts": {"c1": {}}}}}}
        (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
        play = [{"name": "List", "hosts": "storage", "gather_facts": False,
                 "vars": {"awide_member_via": "c1", "awide_etcd_insecure_plaintext": True,
                          "awide_etcd_client_port": client},
                 "tasks": [{"name": "Members", "ansible.builtin.import_role": {
                     "name": "awide", "tasks_from": "etcd_members.yml"}},
                           {"name": "Keep", "ansible.builtin.copy": {
                               "content": "{{ awide_etcd_members | to_json }}",
                               "dest": str(out), "mode": "0600"}}]}]
        (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
        r = _run([str(ansible_tools / "ansible-playbook"), "-i", "inventory.yml", "play.yml"],
                 cwd=tmp_path, ANSIBLE_ROLES_PATH=str(roles))
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    finally:
        proc.kill()
        proc.wait(timeout=10)
    got = json.loads(out.read_text())
    assert sorted((m["id"], m["peer"], m["learner"]) for m in got) == expected
    assert {m["name"] for m in got} == {"m1", ""}       # a learner not started has no name yet
    # nor a client URL (replace-host.yml asks a member on its client URL whether it answers)
    assert {m["name"]: m["client"] for m in got} == {"m1": f"http://127.0.0.1:{client}", "": ""}
    assert [m["learner"] for m in got if m["peer"] == "http://127.0.0.1:1"] == [True]
