"""Certificate rotation without a restart: ``awide-cluster run`` re-reads its etcd CA on
SIGHUP. The members get server certificates of a new CA; the daemon, trusting only the old
one, cannot connect any more; the new CA bundle is written to its CA file, SIGHUP, and the
same process writes again. A bad file on SIGHUP is refused in one line and changes nothing."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from awide_cluster.contract import keys
from awide_cluster.store import EtcdStore, StoreConfig, StoreError, TlsConfig, Unavailable
from awide_harness import ClusterTls, EtcdCluster, make_test_pki
from tests.timing import bound

from .conftest import FAST, config_dict, wait_for
from .test_daemon_process import Proc


@pytest.fixture(scope="module")
def rotating(etcd_binary, tmp_path_factory):
    """A TLS cluster (server certificates only) whose members' certificate files can be
    replaced; the launcher's probe trusts both CAs."""
    d = tmp_path_factory.mktemp("rotation")
    old, new = make_test_pki(d / "old"), make_test_pki(d / "new")
    both = d / "both-ca.pem"
    both.write_bytes(Path(old.ca_file).read_bytes() + Path(new.ca_file).read_bytes())
    cert, key = d / "member.crt", d / "member.key"
    shutil.copy(old.server_cert, cert)
    shutil.copy(old.server_key, key)
    tls = ClusterTls(ca_file=str(both), cert_file=str(cert), key_file=str(key),
                     client_cert_auth=False)
    with EtcdCluster(d / "etcd", binary=etcd_binary, tls=tls, stop_timeout=0.5) as cluster:
        yield cluster, old, new, both, (cert, key)


def _store(cluster: EtcdCluster, ca: str | Path, cluster_name: str) -> EtcdStore:
    return EtcdStore(StoreConfig(tuple(cluster.client_urls), keys.prefix(cluster_name),
                                 call_timeout=bound(1.0), tls=TlsConfig(str(ca))))


def _log(proc: Proc) -> str:
    return Path(proc.log.name).read_text(errors="replace")


async def test_ca_rotation_on_sighup_keeps_the_same_process(rotating, cluster_name, tmp_path):
    cluster, old, new, both, (cert, key) = rotating
    ca = tmp_path / "etcd-ca.pem"
    shutil.copy(old.ca_file, ca)
    cfg = config_dict(cluster, cluster_name, "h1", timing=dict(FAST, lease_ttl=2))
    cfg["etcd"]["tls"] = {"ca_file": str(ca)}
    watcher = _store(cluster, both, cluster_name)
    member = keys.member("h1")

    async def report_rev() -> int:
        kv = await watcher.get(member)
        return kv.mod_revision if kv else 0

    async def advances() -> int:
        """The daemon's report is written again after this call began."""
        start = await report_rev()
        return await wait_for(lambda: _past(report_rev, start), 15, "the report advances")

    proc = Proc(tmp_path, "h1", cfg)
    try:
        await advances()
        pid = proc.p.pid
        # a bad file on SIGHUP: one line naming it, the old CA stays in use
        ca.write_text("not a certificate\n")
        proc.signal(signal.SIGHUP)
        await wait_for(lambda: "credentials reload refused" in _log(proc), 10, "refusal logged")
        refused = [ln for ln in _log(proc).splitlines() if "credentials reload refused" in ln]
        assert len(refused) == 1 and str(ca) in refused[0] and "not PEM" in refused[0]
        await advances()
        # the members now serve certificates of the new CA, restarted one at a time (every
        # connection of the daemon is cut, and its new handshakes fail)
        shutil.copy(new.server_cert, cert)
        shutil.copy(new.server_key, key)
        for i in range(3):
            cluster.restart(i, wait=False)
            await wait_for(lambda ep=cluster.client_urls[i]: _answers(watcher, ep), 20,
                           f"member {i} serves again")
        old_only = _store(cluster, old.ca_file, cluster_name)
        try:
            with pytest.raises(Unavailable, match="(?i)certificate"):
                await old_only.get(member)
        finally:
            await old_only.close()
        await wait_for(lambda: "CERTIFICATE_VERIFY_FAILED" in _log(proc)
                       or "certificate verify failed" in _log(proc), 15,
                       "the daemon's handshakes fail")
        # the new CA (with the old: a bundle, as during a real rollover), SIGHUP, same process
        shutil.copy(both, ca)
        proc.signal(signal.SIGHUP)
        await wait_for(lambda: "credentials re-read from" in _log(proc), 10, "reload logged")
        await advances()
        assert proc.p.poll() is None and proc.p.pid == pid
    finally:
        text = proc.close()
        await watcher.close()
        # the old server certificate back, for the next test of the module
        shutil.copy(old.server_cert, cert)
        shutil.copy(old.server_key, key)
        for i in range(3):
            cluster.restart(i, wait=False)
    assert "Traceback" not in text, text[-3000:]


async def _past(rev, start: int) -> bool:
    try:
        return await rev() > start
    except StoreError:
        return False


async def _answers(store: EtcdStore, endpoint: str) -> bool:
    try:
        await store.endpoint_status(endpoint)
        return True
    except StoreError:
        return False
