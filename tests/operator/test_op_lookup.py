"""One config lookup for every operator command, the wrong kind of file named, "no such
cluster" with the names found, and the exit codes (0 healthy, 1 unhealthy or a state an
operator set, 2 usage/config, 3 etcd unreachable), against a real etcd."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from awide_cluster.cli.main import cli
from awide_cluster.contract import keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract.records import IntentRecord, decode_intent
from awide_cluster.operator import clusters
from awide_cluster.operator.target import DEFAULT_CONFIG
from awide_cluster.store.config import StoreConfig
from awide_cluster.store.etcd import EtcdStore
from tests.operator import op_state as state
from tests.operator.op_fixtures import cluster_name, shared_etcd  # noqa: F401

CLEAN = {"AWIDE_CONFIG": None, "AWIDE_ETCD_ENDPOINTS": None, "AWIDE_CLUSTER": None,
         "AWIDE_DEFAULT_CONFIG": None}


def run(*args: str, env: dict | None = None, input: str | None = None):
    return CliRunner().invoke(cli, list(args), env={**CLEAN, **(env or {})}, input=input,
                              catch_exceptions=False)


def daemon_file(path: Path, etcd, cluster: str, **extra) -> Path:
    path.write_text(yaml.safe_dump({
        "cluster": cluster, "host": "h1", "hosts": ["h1", "h2", "w1"],
        "etcd": {"endpoints": list(etcd.endpoints), "call_timeout": 0.5}, **extra}))
    return path


def gateway_file(path: Path, etcd, cluster: str) -> Path:
    path.write_text(yaml.safe_dump({
        "mode": "cluster", "cluster": cluster, "host": "gpu1", "pod": "vllm-0",
        "etcd": {"endpoints": list(etcd.endpoints), "call_timeout": 0.5},
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "key_placement": "dialog"}))
    return path


def header(r) -> str:
    return r.output.splitlines()[0]


def test_the_default_path_is_the_rollouts():
    assert DEFAULT_CONFIG == "/etc/awide-cluster/cluster.yaml"


def test_lookup_order(shared_etcd, cluster_name, tmp_path):
    other = cluster_name + "-b"
    for name in (cluster_name, other):
        state.write(shared_etcd.endpoints, name, state.healthy_state(name))
    mine = daemon_file(tmp_path / "cluster.yaml", shared_etcd, cluster_name)
    gw = gateway_file(tmp_path / "gateway.yaml", shared_etcd, other)
    eps = ",".join(shared_etcd.endpoints)
    # nothing given, the default exists: it is used
    r = run("status", "--sample", "0", env={"AWIDE_DEFAULT_CONFIG": str(mine)})
    assert r.exit_code == 0, r.output
    assert header(r).startswith(f"cluster {cluster_name}: HEALTHY")
    # nothing given, no default: exit 64 naming every way
    r = run("status", env={"AWIDE_DEFAULT_CONFIG": str(tmp_path / "absent.yaml")})
    assert r.exit_code == 64
    assert "say which cluster" in r.output and "absent.yaml does not exist" in r.output
    assert "$AWIDE_CONFIG" in r.output
    # $AWIDE_CONFIG before the default (a gateway's file works as well)
    r = run("status", "--sample", "0", env={"AWIDE_CONFIG": str(gw),
                                            "AWIDE_DEFAULT_CONFIG": str(mine)})
    assert r.exit_code == 0 and header(r).startswith(f"cluster {other}:"), r.output
    # --config before $AWIDE_CONFIG
    r = run("cards", "--sample", "0", "--config", str(mine), env={"AWIDE_CONFIG": str(gw)})
    assert r.exit_code == 0 and header(r).startswith(f"cluster {cluster_name},"), r.output
    # --endpoints/--cluster before $AWIDE_CONFIG
    r = run("status", "--sample", "0", "--endpoints", eps, "--cluster", cluster_name,
            env={"AWIDE_CONFIG": str(gw)})
    assert r.exit_code == 0 and header(r).startswith(f"cluster {cluster_name}:"), r.output
    # $AWIDE_ETCD_ENDPOINTS with $AWIDE_CLUSTER, after $AWIDE_CONFIG
    r = run("status", "--sample", "0", env={"AWIDE_ETCD_ENDPOINTS": eps,
                                            "AWIDE_CLUSTER": other})
    assert r.exit_code == 0 and header(r).startswith(f"cluster {other}:"), r.output
    r = run("status", "--sample", "0", env={"AWIDE_ETCD_ENDPOINTS": eps})
    assert r.exit_code == 64 and "$AWIDE_CLUSTER" in r.output
    # --cluster with a file: another cluster on the same etcd
    r = run("status", "--sample", "0", "--cluster", other, env={"AWIDE_CONFIG": str(mine)})
    assert r.exit_code == 0 and header(r).startswith(f"cluster {other}:"), r.output
    # both sources on the command line: a usage error
    r = run("status", "--config", str(mine), "--endpoints", eps, "--cluster", other)
    assert r.exit_code == 64 and "not both" in r.output


def test_intent_commands_use_the_same_lookup(shared_etcd, cluster_name, tmp_path):
    """drain/undrain/forget honour $AWIDE_CONFIG and the default file (no leader runs here:
    the intent stays pending, and status shows it with who and why, exit 1)."""
    state.write(shared_etcd.endpoints, cluster_name, state.healthy_state(cluster_name))
    mine = daemon_file(tmp_path / "cluster.yaml", shared_etcd, cluster_name,
                       timing={"poll_interval": 0.1, "lease_ttl": 1})
    for env in ({"AWIDE_CONFIG": str(mine)}, {"AWIDE_DEFAULT_CONFIG": str(mine)}):
        r = run("drain", "h1/card0", "--reason", "replace the fan", env=env)
        assert r.exit_code == 1, r.output
        # it says what it will do, writes the intent, and says it was not applied
        assert "h1/card0, serial SN-A1), state in, slot 2: will be drained" in r.output
        assert "keeps slot 2" in r.output
        assert "within 1.5 s" in r.output            # lease TTL + 5 polls of the file
    cid = state.card("h1", "card0", "SN-A1").id

    async def intent():
        store = state.store_for(shared_etcd.endpoints, cluster_name)
        try:
            return await store.get(keys.intent(cid))
        finally:
            await store.close()
    rec = decode_intent(asyncio.run(intent()).value, cid)
    assert rec.action == "drain" and rec.reason == "replace the fan" and "@" in rec.by
    r = run("status", "--sample", "0", env={"AWIDE_CONFIG": str(mine)})
    assert r.exit_code == 1, r.output
    assert header(r).startswith(f"cluster {cluster_name}: WARN (1 set by an operator: "
                                "intent_pending)")
    assert "replace the fan" in r.output and "intent_pending" in r.output
    doc = json.loads(run("status", "--sample", "0", "-o", "json",
                         env={"AWIDE_CONFIG": str(mine)}).output)
    assert doc["verdict"] == "warn" and doc["healthy"] is True
    assert doc["intents"][0]["reason"] == "replace the fan"
    assert [p["operator_set"] for p in doc["problems"]] == [True]
    # a --reason with a control character is refused before anything is written
    r = run("undrain", "h1/card0", "--reason", "a\x1b[2Jb", env={"AWIDE_CONFIG": str(mine)})
    assert r.exit_code == 64 and "control character" in r.output


def test_wrong_kind_of_file_is_named_in_one_line(shared_etcd, tmp_path):
    gw = gateway_file(tmp_path / "gateway.yaml", shared_etcd, "c1")
    dm = daemon_file(tmp_path / "cluster.yaml", shared_etcd, "c1")
    for args, found, wanted in ((["check-config", str(gw)], "gateway", "daemon"),
                                (["run", "--config", str(gw)], "gateway", "daemon"),
                                (["gateway", "check-config", str(dm)], "daemon", "gateway"),
                                (["gateway", "watch", "--config", str(dm)], "daemon", "gateway")):
        r = run(*args)
        assert r.exit_code == 78, (args, r.output)
        lines = r.output.splitlines()
        assert len(lines) == 1, (args, r.output)
        assert f"this is a {found} config, not a {wanted} config" in lines[0]
        assert "Extra inputs" not in r.output
    # a daemon file with one stray field is still judged as a daemon file: the field is named
    stray = daemon_file(tmp_path / "stray.yaml", shared_etcd, "c1", model={"name": "x"})
    r = run("check-config", str(stray))
    assert r.exit_code == 78 and "model: Extra inputs are not permitted" in r.output
    assert run("check-config", str(dm)).exit_code == 0
    assert run("gateway", "check-config", str(gw)).exit_code == 0
    # the same lookup for their file: $AWIDE_CONFIG, then (a daemon's) the default path
    r = run("check-config", env={"AWIDE_DEFAULT_CONFIG": str(dm)})
    assert r.exit_code == 0 and r.output.startswith(f"{dm}: ok"), r.output
    r = run("check-config", env={"AWIDE_CONFIG": str(gw), "AWIDE_DEFAULT_CONFIG": str(dm)})
    assert r.exit_code == 78 and "this is a gateway config" in r.output
    r = run("check-config", env={"AWIDE_DEFAULT_CONFIG": str(tmp_path / "absent.yaml")})
    assert r.exit_code == 64 and "absent.yaml does not exist" in r.output
    r = run("gateway", "check-config", env={"AWIDE_CONFIG": str(gw)})
    assert r.exit_code == 0 and r.output.startswith(f"{gw}: ok"), r.output
    r = run("gateway", "watch", env={"AWIDE_DEFAULT_CONFIG": str(dm)})
    assert r.exit_code == 64 and "say which gateway config file" in r.output


def test_no_such_cluster_names_the_ones_found(shared_etcd, cluster_name, tmp_path):
    state.write(shared_etcd.endpoints, cluster_name, state.healthy_state(cluster_name))
    mine = daemon_file(tmp_path / "cluster.yaml", shared_etcd, cluster_name)
    typo = cluster_name + "x"
    eps = ",".join(shared_etcd.endpoints)
    for args in (["status", "--endpoints", eps, "--cluster", typo, "--sample", "0"],
                 ["cards", "--config", str(mine), "--cluster", typo, "--sample", "0"],
                 ["drain", "SN-A1", "--config", str(mine), "--cluster", typo],
                 ["forget", "SN-A1", "--config", str(mine), "--cluster", typo, "--yes",
                  "--reason", "r"]):
        r = run(*args)
        assert r.exit_code == 64, (args, r.output)
        assert f"no such cluster {typo!r}" in r.output, r.output
        found = r.output.split("clusters found: ", 1)[1].strip()
        assert cluster_name in found.split(", ") or "..." in found
        assert "no_leader" not in r.output and "registry_missing" not in r.output


def test_cluster_listing_is_bounded(etcd3):
    """At most MAX_NAMES names, one key name read per cluster, whatever their key counts."""
    eps = tuple(etcd3.client_urls)
    names = [f"c{i:02d}" for i in range(clusters.MAX_NAMES + 3)]

    async def go():
        root = EtcdStore(StoreConfig(endpoints=eps, prefix="/awide/"))
        try:
            for n in names:
                for k in ("leader", "registry", "members/h1"):   # several keys per cluster
                    await root.put(f"{n}/{k}", b"{}", timeout=2.0)
            await root.put("bad name/leader", b"{}", timeout=2.0)    # not a cluster name
            await root.put("junk", b"{}", timeout=2.0)               # no folder at all
            return await clusters.cluster_names(StoreConfig(endpoints=eps, prefix="/awide/c00/"),
                                                timeout=5.0)
        finally:
            await root.close()
    found = asyncio.run(go())
    assert found.names == tuple(names[:clusters.MAX_NAMES]) and found.more
    assert found.odd == 1                    # "bad name"; "junk" comes after the bound
    assert found.describe().endswith(", ...")


def test_operator_states_hold_exit_1(shared_etcd, cluster_name):
    eps = ["--endpoints", ",".join(shared_etcd.endpoints), "--cluster", cluster_name,
           "--sample", "0"]
    kvs = state.healthy_state(cluster_name)
    cards = [state.card("h1", "card0", "SN-A1", state="drained", changed=6),
             state.card("h1", "card1", "SN-A2"), state.card("h2", "card0", "SN-B1")]
    kvs[keys.REGISTRY] = regdoc.encode(state.registry(cards, 6, cluster=cluster_name))
    kvs[keys.gateway("g1")] = state.gateway("g1", generation=6)
    kvs[keys.gateway("g2")] = state.gateway("g2", generation=6)
    state.write(shared_etcd.endpoints, cluster_name, kvs)
    r = run("status", *eps)
    assert r.exit_code == 1, r.output
    assert header(r).startswith(f"cluster {cluster_name}: WARN (1 set by an operator: "
                                "card_drained)")
    said = " ".join(r.output.split())       # the compact screen wraps a problem's message
    assert "card_drained" in said and f"awide-cluster undrain {cards[0].id}" in said
    assert "PROBLEMS  none" not in r.output
    assert run("cards", *eps).exit_code == 1
    # undrained: healthy again, exit 0
    cards[0] = state.card("h1", "card0", "SN-A1", changed=7)
    kvs = {keys.REGISTRY: regdoc.encode(state.registry(cards, 7, cluster=cluster_name)),
           keys.gateway("g1"): state.gateway("g1", generation=7),
           keys.gateway("g2"): state.gateway("g2", generation=7)}
    state.write(shared_etcd.endpoints, cluster_name, kvs)
    r = run("status", *eps)
    assert r.exit_code == 0 and header(r).startswith(f"cluster {cluster_name}: HEALTHY  "), \
        r.output
    # a passing warning: HEALTHY (1 warning), exit 0; --strict makes it 1
    state.write(shared_etcd.endpoints, cluster_name,
                {keys.gateway("g2"): state.gateway("g2", generation=7, stale=True)})
    r = run("status", *eps)
    assert r.exit_code == 0 and "HEALTHY (1 warning)" in header(r), r.output
    assert run("status", *eps, "--strict").exit_code == 1
    # an intent nobody applies: exit 1 at once, with who and why
    state.write(shared_etcd.endpoints, cluster_name, {
        keys.gateway("g2"): state.gateway("g2", generation=7),
        keys.intent(cards[1].id): IntentRecord("forget", by="bob@ops2", at="",
                                               reason="RMA 4411").encode()})
    r = run("status", *eps)
    assert r.exit_code == 1 and "intent_pending" in r.output, r.output
    said = " ".join(r.output.split())
    assert "forget of card" in said and "by bob@ops2 (reason: RMA 4411)" in said, r.output


def test_unreachable_is_exit_3(tmp_path):
    dead = ["--endpoints", "http://127.0.0.1:1", "--cluster", "c1", "--call-timeout", "0.1"]
    for args in (["status", *dead], ["cards", *dead], ["drain", "SN-A1", *dead],
                 ["forget", "SN-A1", *dead, "--yes", "--reason", "r"]):
        r = run(*args)
        assert r.exit_code == 3, (args, r.output)
        assert "etcd unreachable" in r.output
