"""Certificate rotation without a restart: ``awide-cluster run`` re-reads its etcd CA on
SIGHUP. The members get server certificates of a new CA; the daemon, trusting only the old
one, cannot connect any more; the new CA bundle is written to its CA file, SIGHUP, and the
same process writes again. A bad file on SIGHUP is refused in one line and changes nothing."""

from __future__ import annotations

import functools
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from awide_cluster.contract import keys
from awide_cluster.store import EtcdStore, StoreConfig, StoreError, TlsConfig, Unavailable
from awide_harness import ClusterTls, EtcdCluster, make_test_pki
from awide_harness.presets import FAST
from tests.timing import bound, wait_until

from .conftest import config_dict
from .test_daemon_process import RUN, Proc


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
        return await wait_until(lambda: _past(report_rev, start), 15, "the report advances")

    proc = Proc(tmp_path, "h1", cfg)
    try:
        await advances()
        pid = proc.p.pid
        # a bad file on SIGHUP: one line naming it, the old CA stays in use
        ca.write_text("not a certificate\n")
        proc.signal(signal.SIGHUP)
        await wait_until(lambda: "credentials reload refused" in _log(proc), 10, "refusal logged")
        refused = [ln for ln in _log(proc).splitlines() if "credentials reload refused" in ln]
        assert len(refused) == 1 and str(ca) in refused[0] and "not PEM" in refused[0]
        await advances()
        # the members now serve certificates of the new CA, restarted one at a time (every
        # connection of the daemon is cut, and its new handshakes fail)
        await _serve(cluster, watcher, new, cert, key)
        old_only = _store(cluster, old.ca_file, cluster_name)
        try:
            with pytest.raises(Unavailable, match="(?i)certificate"):
                await old_only.get(member)
        finally:
            await old_only.close()
        await wait_until(lambda: "CERTIFICATE_VERIFY_FAILED" in _log(proc)
                       or "certificate verify failed" in _log(proc), 15,
                       "the daemon's handshakes fail")
        # the new CA (with the old: a bundle, as during a real rollover), SIGHUP, same process
        shutil.copy(both, ca)
        proc.signal(signal.SIGHUP)
        await wait_until(lambda: "credentials re-read from" in _log(proc), 10, "reload logged")
        await advances()
        assert proc.p.poll() is None and proc.p.pid == pid
    finally:
        text = proc.close()
        try:    # the old server certificate back, for the next test of the module
            await _serve(cluster, watcher, old, cert, key)
        finally:
            await watcher.close()
    assert "Traceback" not in text, text[-3000:]


async def _serve(cluster: EtcdCluster, watcher: EtcdStore, pki, cert: Path, key: Path) -> None:
    """The members serve ``pki``'s server certificate: restarted one at a time (every client
    connection is cut), each waited for before the next."""
    shutil.copy(pki.server_cert, cert)
    shutil.copy(pki.server_key, key)
    for i in range(3):
        cluster.restart(i, wait=False)
        endpoint = cluster.client_urls[i]
        await wait_until(functools.partial(_answers, watcher, endpoint), 20,
                       f"member {i} serves again")


async def test_the_gateway_cli_re_reads_its_ca_on_sighup(rotating, cluster_name, tmp_path):
    cluster, old, new, both, (cert, key) = rotating
    ca = tmp_path / "etcd-ca.pem"
    shutil.copy(old.ca_file, ca)
    doc = {"mode": "cluster", "cluster": cluster_name, "host": "gpu1", "pod": "p1",
           "etcd": {"endpoints": list(cluster.client_urls), "call_timeout": 0.3,
                    "tls": {"ca_file": str(ca)}},
           "timing": {"poll_interval": 0.35, "sick_polls": 2, "healthy_polls": 1,
                      "lease_ttl": 2},
           "model": {"name": "test/model-7b", "num_layers": 4}, "watch": False,
           "start_timeout": 5.0}
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(doc))
    err_path = tmp_path / "gw.err"
    record = keys.gateway("gpu1-p1")
    watcher = _store(cluster, both, cluster_name)

    def err() -> str:
        return err_path.read_text(errors="replace")

    async def present() -> bool:
        assert proc.poll() is None, f"the gateway exited: {err()[-2000:]}"
        try:
            return await watcher.get(record) is not None
        except StoreError:
            return False

    async def absent() -> bool:
        try:
            return await watcher.get(record) is None
        except StoreError:
            return False

    with open(err_path, "wb") as err_file, open(tmp_path / "gw.out", "wb") as out_file:
        proc = subprocess.Popen(RUN + ["gateway", "watch", "--config", str(path)],
                                stdout=out_file, stderr=err_file)
        try:
            await wait_until(present, 20, "the gateway registered")
            pid = proc.pid
            ca.write_text("-----BEGIN CERTIFICATE-----\n")
            proc.send_signal(signal.SIGHUP)
            await wait_until(lambda: "credentials reload refused" in err(), 10, "refusal said")
            assert f"{ca}: a PEM block is not closed" in err()
            await _serve(cluster, watcher, new, cert, key)
            # its keepalives cannot reach etcd: the record goes with its lease
            await wait_until(absent, 20, "the gateway's record expired")
            shutil.copy(both, ca)
            proc.send_signal(signal.SIGHUP)
            await wait_until(lambda: "credentials re-read from" in err(), 10, "reload said")
            await wait_until(present, 20, "the gateway registered again")
            assert proc.poll() is None and proc.pid == pid
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
            try:
                await _serve(cluster, watcher, old, cert, key)
            finally:
                await watcher.close()
    assert "Traceback" not in err(), err()[-3000:]


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
