"""Daemons and gateways run on a secured etcd (TLS, authentication on), each as its own
least-privilege user: the registry forms, a card fault goes out and back through the leader's
registry writes, `status` reads with a daemon's identity; other writes stay refused."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from awide_cluster.access.plan import gateway_user, host_user, operator_user, reader_user
from awide_cluster.contract import keys
from awide_cluster.store import Denied, EtcdStore, StoreConfig, TlsConfig
from awide_harness.cluster import EmbeddedCluster
from awide_harness.spec import ClusterSpec, Timing
from awide_harness.views import card_in, card_out
from tests.embedded.support import etcd_or_skip

SPEC = ClusterSpec(cluster="secure", storage_hosts=2, cards_per_host=1, witness_hosts=1,
                   gateways=2, timing=Timing.quick(), secure=True)
RUN = [sys.executable, "-c", "from awide_cluster.cli.main import main; main()"]


async def test_a_secured_cluster_forms_and_serves(tmp_path):
    etcd_or_skip()
    with EmbeddedCluster(tmp_path, SPEC) as c:
        assert all(ep.startswith("https://") for ep in c.etcd.endpoints)
        reg = c.registry()
        assert reg is not None and len(reg.cards) == 2
        assert c.leader_host() in SPEC.hosts
        key = "s1/c0"
        t0 = c.card_store_kill(key)
        out = c.wait_until(card_out(c.card_id(key)), 15.0, since=t0)
        assert all(t is not None for t in out.values()), out
        t1 = c.card_store_start(key)
        back = c.wait_until(card_in(c.card_id(key)), 15.0, since=t1)
        assert all(t is not None for t in back.values()), back

        def cli(*argv: str) -> subprocess.CompletedProcess:
            return subprocess.run(RUN + list(argv), capture_output=True, text=True, timeout=60)

        def config_of(user: str) -> str:
            """An operator's file: the cluster and its etcd section, as `--config` takes."""
            path = tmp_path / f"{user.split(':')[0]}.yaml"
            path.write_text(yaml.safe_dump({"cluster": SPEC.cluster, "etcd": {
                "endpoints": list(c.etcd.endpoints), "call_timeout": 3.0,
                "hedge_after": 0.5, **(c.etcd_auth(user) or {})}}))
            return str(path)

        for cfg in (str(tmp_path / "config" / "s1.yaml"),
                    config_of(reader_user(SPEC.cluster))):
            # the daemon's file carries its quick call bound (0.2 s): a TLS handshake on a
            # loaded machine may take longer, and this checks identity and access, not speed
            # (nor report ages: one read)
            status = cli("status", "--config", cfg, "--call-timeout", "3", "--sample", "0")
            assert status.returncode in (0, 1), status.stdout + status.stderr
            assert "etcd_unreachable" not in status.stdout and "Traceback" not in status.stderr

        # the operator drains and undrains a card; the reader may not
        op, rd = config_of(operator_user(SPEC.cluster)), config_of(reader_user(SPEC.cluster))
        card = c.card_id("s2/c0")
        refused = cli("drain", card, "--config", rd, "--wait", "5")
        assert refused.returncode == 1 and "Denied" in refused.stderr, refused.stderr
        for action in ("drain", "undrain"):
            done = cli(action, card, "--config", op, "--wait", "15")
            assert done.returncode == 0, done.stdout + done.stderr
        reg = c.registry()
        assert reg is not None and all(x.state == "in" for x in reg.cards)

        def store(user: str | None) -> EtcdStore:
            creds = {"username": user, "password": c.password(user)} if user else {}
            return EtcdStore(StoreConfig(c.etcd.endpoints, prefix=keys.prefix(SPEC.cluster),
                                         tls=TlsConfig(c.pki.ca_file), call_timeout=5.0,
                                         **creds))

        gw = store(gateway_user(SPEC.cluster, c.gateway_ids[0]))
        w1 = store(host_user(SPEC.cluster, "w1"))
        anon = store(None)
        try:
            for s, k in ((gw, keys.REGISTRY), (gw, keys.LEADER), (gw, keys.member("s1")),
                         (w1, keys.member("s1")), (anon, keys.member("w1"))):
                with pytest.raises(Denied):
                    await s.put(k, b"forged")
            assert (await gw.get(keys.REGISTRY)) is not None
        finally:
            for s in (gw, w1, anon):
                await s.close()
