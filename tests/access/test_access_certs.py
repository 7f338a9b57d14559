"""The access plan under client-certificate authentication (``--client-cert-auth``, auth
enabled): a certificate's Common Name is its etcd user. Checked with ``etcdctl`` (gRPC), whose
certificate etcd maps to the user; etcd's JSON gateway, which the daemon and the gateway speak,
ignores the CN and refuses every call once auth is on (docs/security.md)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from awide_cluster.access.apply import AuthApi, apply
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
from awide_harness import ClusterTls, EtcdCluster, make_test_pki
from awide_harness.certs import client_certificate

CLUSTER = "certs"


@pytest.fixture(scope="module")
def cert_cluster(etcd_binary, tmp_path_factory):
    etcdctl = Path(etcd_binary).with_name("etcdctl")
    if not etcdctl.exists():
        pytest.skip(f"no etcdctl next to {etcd_binary}")
    tmp = tmp_path_factory.mktemp("certs")
    pki = make_test_pki(tmp / "pki", client_cn="root")
    tls = ClusterTls(ca_file=pki.ca_file, cert_file=pki.server_cert, key_file=pki.server_key)
    plan = access_plan(CLUSTER, ["h1", "h2"], [GatewayIdentity("g1", "ns1")])
    certs = {u.name: client_certificate(pki, u.name) for u in plan.users}
    certs["root"] = (pki.client_cert, pki.client_key)
    with EtcdCluster(tmp / "etcd", binary=etcd_binary, tls=tls, stop_timeout=0.5) as etcd:
        yield etcd, pki, plan, certs, str(etcdctl)


def ctl(cc, who: str | None, *args: str) -> subprocess.CompletedProcess:
    etcd, pki, _, certs, etcdctl = cc
    tls = ["--cacert", pki.ca_file]
    if who is not None:
        tls += ["--cert", certs[who][0], "--key", certs[who][1]]
    return subprocess.run(
        [etcdctl, "--endpoints", ",".join(etcd.endpoints), *tls, "--dial-timeout=2s",
         "--command-timeout=5s", *args],
        capture_output=True, text=True, timeout=30, env={"ETCDCTL_API": "3"})


async def test_certificate_identities(cert_cluster, make_store):
    etcd, pki, plan, _, _ = cert_cluster
    base = plan.prefix
    # applied through the JSON API while auth is off (the first apply of a cluster), with a
    # client certificate as the members demand; the root user gets a password nobody keeps
    store = make_store(etcd.endpoints, tls=TlsConfig(pki.ca_file, pki.client_cert,
                                                     pki.client_key), call_timeout=5.0)
    done = await apply(AuthApi(store, 10.0), plan, {"root": "unused-" + CLUSTER})
    assert done.steps[-1].action == "enable-auth" and done.kept == ()

    def put(who: str | None, key: str) -> bool:
        got = ctl(cert_cluster, who, "put", base + key, "v")
        assert got.returncode == 0 or who is None or "permission denied" in got.stderr, got
        return got.returncode == 0

    h1, g1 = host_user(CLUSTER, "h1"), gateway_user(CLUSTER, "g1")
    assert put(h1, keys.member("h1")) and put(h1, keys.REGISTRY) and put(h1, keys.LEADER)
    assert not put(h1, keys.member("h2"))
    assert put(g1, keys.gateway("g1")) and put(g1, keys.layout("ns1"))
    for key in (keys.REGISTRY, keys.LEADER, keys.member("h1"), keys.gateway("g2")):
        assert not put(g1, key), key
    assert put(operator_user(CLUSTER), keys.intent("c1"))
    assert not put(operator_user(CLUSTER), keys.REGISTRY)
    assert not put(reader_user(CLUSTER), keys.intent("c1"))
    got = ctl(cert_cluster, reader_user(CLUSTER), "get", base + keys.member("h1"),
              "--print-value-only")
    assert got.returncode == 0 and got.stdout.strip() == "v", got
    assert not put(None, keys.member("h1"))         # no certificate: no connection
    assert ctl(cert_cluster, "root", "user", "list").returncode == 0    # CN root is root

    # the JSON gateway under client-certificate auth: every call refused once auth is on
    with pytest.raises(Denied, match="CommonName.*give this client a password"):
        await store.get(keys.REGISTRY)
