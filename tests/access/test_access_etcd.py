"""The access plan applied to a real 3-member etcd with TLS and authentication: each identity
makes the writes it must, and etcd refuses the others.

Identities authenticate by password here, as the daemon and the gateway do: they speak etcd's
JSON gateway, which ignores client certificates' CN (test_access_certs.py shows the CN
mapping with etcdctl, and the JSON gateway refusing service under it)."""

from __future__ import annotations

import secrets
import subprocess
import sys

import pytest
import yaml

from awide_cluster.access.plan import (
    GatewayIdentity,
    access_plan,
    gateway_user,
    host_user,
    operator_user,
    reader_user,
)
from awide_cluster.contract import keys
from awide_cluster.store import Denied, TlsConfig
from awide_cluster.store.types import Compare, Delete, Put
from awide_harness import ClusterTls, EtcdCluster, make_test_pki

RUN = [sys.executable, "-c", "from awide_cluster.cli.main import main; main()"]
SLOW = 5.0                      # bcrypt password checks on a loaded machine
HOSTS = ("h1", "h2")
GATEWAYS = (GatewayIdentity("g1", "ns1"), GatewayIdentity("g2", "ns1"))


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(RUN + list(argv), capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def secured(etcd_binary, tmp_path_factory):
    """3 members, server-side TLS; `awide-cluster access apply` run once (auth enabled)."""
    tmp = tmp_path_factory.mktemp("access")
    pki = make_test_pki(tmp / "pki")
    tls = ClusterTls(ca_file=pki.ca_file, cert_file=pki.server_cert, key_file=pki.server_key,
                     client_cert_auth=False)
    cluster = f"acc{secrets.token_hex(3)}"
    plan = access_plan(cluster, HOSTS, GATEWAYS)
    pwdir = tmp / "passwords"
    pwdir.mkdir(mode=0o700)
    passwords = {name: "pw-" + secrets.token_hex(8)
                 for name in ["root", *(u.name for u in plan.users)]}
    for name, pw in passwords.items():
        (pwdir / name).write_text(pw + "\n")
        (pwdir / name).chmod(0o600)
    with EtcdCluster(tmp / "etcd", binary=etcd_binary, tls=tls, stop_timeout=0.5) as etcd:
        cfg = tmp / "cluster.yaml"
        cfg.write_text(yaml.safe_dump({
            "cluster": cluster, "host": "h1", "hosts": list(HOSTS), "role": "witness",
            "etcd": {"endpoints": list(etcd.endpoints), "call_timeout": 3.0,
                     "hedge_after": 0.5, "tls": {"ca_file": pki.ca_file}}}))
        done = _cli("access", "apply", "--config", str(cfg), "--host", ",".join(HOSTS),
                    "--gateway", "g1=ns1,g2=ns1", "--passwords", str(pwdir))
        assert done.returncode == 0, done.stderr + done.stdout
        assert "did: enable authentication" in done.stdout.splitlines()[-2], done.stdout
        for pw in passwords.values():
            assert pw not in done.stdout + done.stderr
        yield etcd, pki, plan, passwords, cfg, tmp


def test_a_second_apply_has_nothing_to_do(secured):
    _, _, _, passwords, cfg, tmp = secured
    only_root = tmp / "root-only"
    only_root.mkdir(mode=0o700, exist_ok=True)
    (only_root / "root").write_text(passwords["root"])
    (only_root / "root").chmod(0o600)
    done = _cli("access", "apply", "--config", str(cfg), "--host", ",".join(HOSTS),
                "--gateway", "g1=ns1,g2=ns1", "--passwords", str(only_root), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:-1] == ["would: enable authentication"], done.stdout
    # a host left out: kept and listed, deleted only with --prune
    h2 = host_user(secured[2].cluster, "h2")
    base = ["access", "apply", "--config", str(cfg), "--host", "h1", "--gateway",
            "g1=ns1,g2=ns1", "--passwords", str(only_root), "--dry-run"]
    done = _cli(*base)
    assert done.returncode == 0, done.stderr
    assert f"kept: {h2} (not in the plan; --prune deletes it)" in done.stdout, done.stdout
    assert "would: delete" not in done.stdout
    done = _cli(*base, "--prune")
    assert done.returncode == 0, done.stderr
    assert f"would: delete user {h2}" in done.stdout and f"would: delete role {h2}" in \
        done.stdout and "kept" not in done.stdout, done.stdout
    # without root's credentials, auth on: refused, exit 1
    done = _cli("access", "apply", "--config", str(cfg), "--host", "h1", "--dry-run")
    assert done.returncode == 1, done.stderr + done.stdout
    assert "refused" in done.stderr


async def test_each_identity_writes_what_it_must_and_no_more(secured, make_store):
    etcd, pki, plan, passwords, _, _ = secured
    tls = TlsConfig(pki.ca_file)

    def as_(user: str | None, prefix: str = plan.prefix):
        creds = {"username": user, "password": passwords[user]} if user else {}
        return make_store(etcd.endpoints, prefix=prefix, tls=tls, call_timeout=SLOW, **creds)

    async def refused(store, key: str) -> None:
        with pytest.raises(Denied):
            await store.put(key, b"forged")

    # a daemon: its report, the leader key on a lease, the leader's registry transaction
    h1 = as_(host_user(plan.cluster, "h1"))
    await h1.put(keys.member("h1"), b"report")
    lease = await h1.grant(10)
    await h1.create(keys.LEADER, b"h1", lease=lease.id)
    await h1.put(keys.intent("c1"), b"{}")
    res = await h1.txn([Compare(keys.REGISTRY, "mod", "equal", 0)],
                       [Put(keys.REGISTRY, b"{}"), Delete(keys.intent("c1"))])
    assert res.succeeded
    for key in (keys.member("h2"), keys.gateway("g1"), keys.layout("ns1")):
        await refused(h1, key)
    assert (await h1.get(keys.member("h1"))).value == b"report"

    # a gateway: its record on a lease and its namespace's layout; nothing of the cluster's
    g1 = as_(gateway_user(plan.cluster, "g1"))
    gl = await g1.grant(10)
    await g1.put(keys.gateway("g1"), b"g1", lease=gl.id)
    await g1.create(keys.layout("ns1"), b"layout")
    assert (await g1.get(keys.REGISTRY)) is not None
    for key in (keys.REGISTRY, keys.HISTORY, keys.LEADER, keys.member("h1"), keys.member("g1"),
                keys.gateway("g2"), keys.layout("ns2"), keys.intent("c1")):
        await refused(g1, key)

    # the operator: intents and window requests only
    op = as_(operator_user(plan.cluster))
    await op.put(keys.intent("c2"), b"{}")
    await op.put(keys.window_request("host", "h1"), b"{}")
    for key in (keys.REGISTRY, keys.LEADER, keys.member("h1"), keys.gateway("g1"),
                keys.WINDOWS):
        await refused(op, key)

    # the reader: reads everything under the prefix, writes nothing
    rd = as_(reader_user(plan.cluster))
    assert (await rd.get(keys.member("h1"))).value == b"report"
    assert len((await rd.range("", prefix=True)).kvs) >= 4
    for key in (keys.intent("c3"), keys.REGISTRY, keys.member("h1")):
        await refused(rd, key)

    # nobody reads or writes outside the cluster's prefix
    elsewhere = as_(host_user(plan.cluster, "h1"), prefix="/awide/other/")
    with pytest.raises(Denied):
        await elsewhere.get(keys.REGISTRY)
    await refused(elsewhere, keys.member("h1"))

    # no credentials: nothing at all
    anon = as_(None)
    with pytest.raises(Denied):
        await anon.get(keys.REGISTRY)
    await refused(anon, keys.member("h1"))
