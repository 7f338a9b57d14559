"""``awide-cluster status`` / ``cards`` as a user runs them: formats, exit codes, config files,
--watch, shell completion."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from click.testing import CliRunner

from awide_cluster.cli.main import cli
from awide_cluster.contract import keys
from awide_cluster.contract import registry as regdoc
from tests.operator import op_state as state
from tests.operator.op_fixtures import cluster_name, shared_etcd  # noqa: F401
from tests.timing import bound

CLI = str(Path(sys.executable).with_name("awide-cluster"))


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def target(etcd, name):
    return ["--endpoints", ",".join(etcd.endpoints), "--cluster", name, "--sample", "0"]


def test_status_formats_and_exit_code_healthy(shared_etcd, cluster_name):
    state.write(shared_etcd.endpoints, cluster_name, state.healthy_state(cluster_name))
    t = target(shared_etcd, cluster_name)
    r = run("status", *t)
    assert r.exit_code == 0, r.output
    assert f"cluster {cluster_name}: HEALTHY" in r.output
    doc = json.loads(run("status", *t, "-o", "json").output)
    assert doc["healthy"] is True and doc["cluster"] == cluster_name
    assert doc["etcd"]["quorum"] == "ok" and len(doc["etcd"]["members"]) == 3
    ydoc = yaml.safe_load(run("status", *t, "--format", "yaml").output)
    assert ydoc["cards"] == doc["cards"] and ydoc["problems"] == []


def test_unhealthy_exit_code_and_strict(shared_etcd, cluster_name):
    kvs = state.healthy_state(cluster_name)
    kvs[keys.LEADER] = None
    state.write(shared_etcd.endpoints, cluster_name, kvs)
    r = run("status", *target(shared_etcd, cluster_name))
    assert r.exit_code == 2 and "UNHEALTHY (1 problem)" in r.output and "no_leader" in r.output
    # warnings only: healthy, unless --strict
    kvs = state.healthy_state(cluster_name)
    kvs[keys.gateway("g2")] = state.gateway("g2", stale=True)
    state.write(shared_etcd.endpoints, cluster_name, kvs)
    assert run("status", *target(shared_etcd, cluster_name)).exit_code == 0
    assert run("status", *target(shared_etcd, cluster_name), "--strict").exit_code == 1


def test_cards_command(shared_etcd, cluster_name):
    kvs = state.healthy_state(cluster_name)
    state.write(shared_etcd.endpoints, cluster_name, kvs)
    r = run("cards", *target(shared_etcd, cluster_name))
    assert r.exit_code == 0
    lines = r.output.splitlines()
    assert lines[0] == f"cluster {cluster_name}, registry generation 5"
    assert lines[1].split()[:4] == ["SLOT", "ID", "SERIAL", "HOST"]
    assert len(lines) == 2 + 3 and "GATEWAYS" not in r.output
    cards = [state.card("h1", "card0", "SN-A1", state="out", health="sick", reason="gone")]
    state.write(shared_etcd.endpoints, cluster_name,
                {keys.REGISTRY: regdoc.encode(state.registry(cards, 6, cluster=cluster_name))})
    r = run("cards", *target(shared_etcd, cluster_name), "-o", "json")
    assert r.exit_code == 2
    states = {c["serial"]: c["state"] for c in json.loads(r.output)["cards"]}
    assert states == {"SN-A1": "out", "SN-A2": "unregistered", "SN-B1": "unregistered"}


def test_config_file_of_a_gateway(shared_etcd, cluster_name, tmp_path):
    state.write(shared_etcd.endpoints, cluster_name, state.healthy_state(cluster_name))
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(yaml.safe_dump({
        "mode": "cluster", "cluster": cluster_name, "host": "gpu1", "pod": "vllm-0",
        "etcd": {"endpoints": list(shared_etcd.endpoints), "call_timeout": 0.5},
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "key_placement": "dialog",
    }))
    r = run("status", "--config", str(cfg), "--sample", "0", "-o", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["cluster"] == cluster_name


def test_config_errors_exit_78_usage_errors_64(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: c1\netcd:\n  endpoints: [localhost:2379]\n")
    r = CliRunner().invoke(cli, ["status", "--config", str(bad)])
    assert r.exit_code == 78 and "etcd.endpoints" in r.output and "http(s)://HOST:PORT" in r.output
    r = CliRunner().invoke(cli, ["status", "--config", str(tmp_path / "missing.yaml")])
    assert r.exit_code == 78 and "cannot read the file" in r.output
    nameless = tmp_path / "nameless.yaml"
    nameless.write_text("etcd: {endpoints: ['http://127.0.0.1:2379']}\n")
    r = CliRunner().invoke(cli, ["status", "--config", str(nameless)])
    assert r.exit_code == 78 and "cluster: missing" in r.output
    nowhere = {"AWIDE_CONFIG": None, "AWIDE_ETCD_ENDPOINTS": None,
               "AWIDE_DEFAULT_CONFIG": str(tmp_path / "absent.yaml")}
    assert CliRunner().invoke(cli, ["status"], env=nowhere).exit_code == 64
    assert CliRunner().invoke(cli, ["status", "--endpoints", "http://127.0.0.1:1"]).exit_code == 64
    assert CliRunner().invoke(cli, ["status", "-o", "xml"]).exit_code == 64
    r = CliRunner().invoke(cli, ["status", "--endpoints", "http://127.0.0.1:1",
                                 "--cluster", "bad/name"])
    assert r.exit_code == 64 and "not a valid name" in r.output


def test_watch_refreshes_until_interrupted(shared_etcd, cluster_name):
    state.write(shared_etcd.endpoints, cluster_name, state.healthy_state(cluster_name))
    p = subprocess.Popen([CLI, "status", *target(shared_etcd, cluster_name), "--watch", "0.3"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    try:
        # interrupt once two refreshes were printed (a condition, not a sleep: the CLI may
        # take seconds to start on a loaded machine)
        deadline = time.monotonic() + 60
        assert p.stdout is not None
        while (sum(f"cluster {cluster_name}: HEALTHY" in ln for ln in seen) < 2
               or not any(">=" in ln for ln in seen)):
            assert time.monotonic() < deadline, "status --watch printed no two refreshes"
            ready, _, _ = select.select([p.stdout], [], [], 1.0)
            if ready:
                line = p.stdout.readline()
                assert line, "status --watch ended early"
                seen.append(line)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=bound(30))
        out = "".join(seen) + out
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    assert "Traceback" not in err
    assert out.count(f"cluster {cluster_name}: HEALTHY") >= 2
    # ages are measured across refreshes: the never-rewritten reports grow older
    assert ">=" in out


def test_bash_completion_script():
    r = subprocess.run([CLI], env={**os.environ, "_AWIDE_CLUSTER_COMPLETE": "bash_source"},
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 0 and "_awide_cluster_completion" in r.stdout
    r = subprocess.run([CLI], env={**os.environ, "_AWIDE_CLUSTER_COMPLETE": "bash_complete",
                                   "COMP_WORDS": "awide-cluster sta", "COMP_CWORD": "1"},
                       capture_output=True, text=True, timeout=20)
    assert "status" in r.stdout


def test_status_of_a_demo_sized_cluster_fits_80x24_and_wide_shows_all(shared_etcd, cluster_name):
    from tests.operator.test_op_render import demo_kvs
    kvs, cards = demo_kvs(cluster_name)
    state.write(shared_etcd.endpoints, cluster_name, kvs)
    t = target(shared_etcd, cluster_name)
    r = run("status", *t)
    assert r.exit_code == 2, r.output
    lines = r.output.rstrip("\n").split("\n")
    assert len(lines) <= 24 and max(map(len, lines)) <= 80, r.output
    assert all(sum(c.id in line for line in lines) >= 1 for c in cards)
    wide = run("status", *t, "-o", "wide").output
    assert "MEMBER" in wide and all(c.serial in wide for c in cards)
    assert max(len(line) for line in wide.split("\n")) > 80       # everything: wide
    # --watch to a pipe: whole frames, a blank line between; --count bounds it
    root = str(Path(__file__).resolve().parents[2])      # this tree's code, not the venv's
    p = subprocess.run([CLI, "status", *t, "--watch", "0.2", "--count", "2"],
                       capture_output=True, text=True, timeout=bound(60),
                       env={**os.environ, "PYTHONPATH": root})
    assert p.returncode == 2, p.stderr
    frames = p.stdout.split("\n\n")
    assert [f.startswith(f"cluster {cluster_name}: UNHEALTHY") for f in frames if f.strip()] \
        == [True, True], p.stdout
    assert "\x1b[" not in p.stdout and "Traceback" not in p.stderr


def test_history_follow_prints_new_entries_until_interrupted(shared_etcd, cluster_name):
    from awide_cluster.contract import history_ring as histdoc

    def entry(gen: int, why: str) -> histdoc.Entry:
        return histdoc.Entry(generation=gen, kind="drained", reason="drained (was in)",
                             card="c0123456789a", name="card0", host="h1", by="ops@b", why=why)

    ring = histdoc.append(histdoc.EMPTY, [entry(6, "first"), entry(7, "second")], ring="r1")
    kvs: dict[str, bytes | None] = {**state.healthy_state(cluster_name),
                                    keys.HISTORY: histdoc.encode(ring)}
    state.write(shared_etcd.endpoints, cluster_name, kvs)
    root = str(Path(__file__).resolve().parents[2])      # this tree's code, not the venv's
    p = subprocess.Popen([CLI, "history", *target(shared_etcd, cluster_name)[:-2], "--follow",
                          "--interval", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**os.environ, "PYTHONPATH": root})
    got = b""

    def until(text: str) -> None:
        nonlocal got
        deadline = time.monotonic() + bound(30)
        assert p.stdout is not None
        while text.encode() not in got:
            assert time.monotonic() < deadline, f"history --follow never printed {text!r}"
            ready, _, _ = select.select([p.stdout], [], [], 1.0)
            if ready:
                chunk = os.read(p.stdout.fileno(), 65536)
                assert chunk, f"history --follow ended early: {got!r}"
                got += chunk

    try:
        until(": second]")                  # the entries there first
        assert got.decode().splitlines()[0].endswith(": first]"), got
        later = histdoc.append(ring, [entry(8, "third")])
        state.write(shared_etcd.endpoints, cluster_name, {keys.HISTORY: histdoc.encode(later)})
        until(": third]")                   # then each new one, once
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=bound(10))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    assert b"Traceback" not in err and out == b""
    assert [line.rpartition(": ")[2] for line in got.decode().splitlines()] == [
        "first]", "second]", "third]"]
