"""No secret in logs or answers: ``awide-cluster run`` (debug logging) with an etcd password
against a real etcd that demands TLS and authentication. The password never appears in the
daemon's log, its HTTP API, `status`, `check-config`, a refused reload, nor (wrong password)
in the authentication errors it logs."""

from __future__ import annotations

import json
import secrets
import signal
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from awide_harness import ClusterTls, EtcdCluster, make_test_pki
from awide_harness.ports import reserve_port
from awide_harness.waits import WaitTimeout, wait_until_sync
from tests.store.helpers import admin

RUN = [sys.executable, "-c", "from awide_cluster.cli.main import main; main()"]
PASSWORD = "pw-" + secrets.token_hex(12)
WRONG = "wrong-" + secrets.token_hex(12)
BOUND = 30.0                      # generous: bcrypt password checks on a loaded machine


@pytest.fixture(scope="module")
def secured(etcd_binaries, tmp_path_factory):
    """One etcd member with TLS and authentication on. Server-side TLS only: with client
    certificates demanded, etcd's JSON gateway refuses password authentication ("CommonName
    of client sending a request against gateway will be ignored"), see docs/security.md."""
    tmp = tmp_path_factory.mktemp("secured")
    pki = make_test_pki(tmp / "pki")
    tls = ClusterTls(ca_file=pki.ca_file, cert_file=pki.server_cert, key_file=pki.server_key,
                     client_cert_auth=False)
    binary = next(iter(etcd_binaries.values()))
    with EtcdCluster(tmp / "etcd", size=1, binary=binary, tls=tls, stop_timeout=0.5) as etcd:
        ctx = ssl.create_default_context(cafile=pki.ca_file)
        ep = etcd.endpoints[0]
        admin(ep, "/v3/auth/user/add", {"name": "root", "password": PASSWORD}, context=ctx)
        admin(ep, "/v3/auth/role/add", {"name": "root"}, context=ctx)
        admin(ep, "/v3/auth/user/grant", {"user": "root", "role": "root"}, context=ctx)
        admin(ep, "/v3/auth/enable", {}, context=ctx)
        yield etcd, pki


def _config(etcd: EtcdCluster, pki, tmp: Path, password: str, port: int) -> dict:
    pw_file = tmp / "etcd-password"
    pw_file.write_text(password + "\n")
    pw_file.chmod(0o600)
    return {"cluster": f"sec{secrets.token_hex(3)}", "host": "h1", "hosts": ["h1"],
            "role": "witness",
            "dev_cluster": True,
            "etcd": {"endpoints": list(etcd.endpoints), "call_timeout": 3.0, "hedge_after": 0.5,
                     "tls": {"ca_file": pki.ca_file},
                     "username": "root", "password_file": str(pw_file)},
            "timing": {"poll_interval": 0.5, "lease_ttl": 10},
            "api": {"listen": f"127.0.0.1:{port}"}}


def _wait(pred, what: str, log: Path):
    try:
        return wait_until_sync(pred, BOUND, what, poll=0.1)
    except WaitTimeout as e:
        raise AssertionError(f"{e}; daemon log:\n"
                             + log.read_text(errors="replace")[-4000:]) from None


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(RUN + list(argv), capture_output=True, text=True, timeout=60)


def _stop(proc: subprocess.Popen, log: Path) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return log.read_text(errors="replace")


def test_the_password_is_in_no_log_answer_or_error(secured, tmp_path) -> None:
    etcd, pki = secured
    port = reserve_port()
    cfg = _config(etcd, pki, tmp_path, PASSWORD, port)
    config = tmp_path / "cluster.yaml"
    config.write_text(yaml.safe_dump(cfg))
    log = tmp_path / "daemon.log"
    seen: list[str] = []
    with open(log, "wb") as out:
        proc = subprocess.Popen(RUN + ["run", "--config", str(config), "--log-level", "debug"],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait(lambda: _get(port, "/readyz")[0] == 200 or proc.poll() is not None,
              "the daemon to be ready (password over TLS)", log)
        assert proc.poll() is None, log.read_text()
        for path in ("/v1/status", "/metrics", "/healthz", "/readyz"):
            status, body = _get(port, path)
            assert status == 200, (path, body)
            seen.append(body)
        view = json.loads(seen[0])
        assert view["host"] == "h1"
        for argv in (["check-config", str(config)],       # status: one read, no age checked
                     ["status", "--config", str(config), "--sample", "0"],
                     ["status", "--config", str(config), "--sample", "0", "--format", "json"]):
            r = _cli(*argv)
            # a one-member dev cluster: status warns (exit 1, set by an operator), never fails
            # to read it (2: usage, 3: unreachable)
            ok = (0,) if argv[0] == "check-config" else (0, 1)
            assert r.returncode in ok and "Traceback" not in r.stderr, (argv, r.stdout, r.stderr)
            if argv[0] == "status":
                assert "dev_cluster" in r.stdout and "etcd_unreachable" not in r.stdout
            seen += [r.stdout, r.stderr]

        # a reload with the password inline and in an endpoint URL: refused, named, redacted
        bad = json.loads(json.dumps(cfg))
        del bad["etcd"]["password_file"]
        bad["etcd"]["password"] = PASSWORD
        bad["etcd"]["endpoints"] = [e.replace("https://", f"https://root:{PASSWORD}@")
                                    for e in cfg["etcd"]["endpoints"]]
        config.write_text(yaml.safe_dump(bad))
        proc.send_signal(signal.SIGHUP)
        _wait(lambda: "reload refused" in log.read_text(errors="replace"), "the refused reload",
              log)
        r = _cli("check-config", str(config))
        assert r.returncode == 78 and "etcd.endpoints" in r.stderr and "***@" in r.stderr, r.stderr
        seen += [r.stdout, r.stderr]
    finally:
        text = _stop(proc, log)
    assert "DEBUG" in text and "reload refused" in text and "***@" in text, text[-3000:]
    seen.append(text)
    for what in seen:
        assert PASSWORD not in what, what[-3000:]


def test_a_wrong_password_is_not_logged_either(secured, tmp_path) -> None:
    etcd, pki = secured
    port = reserve_port()
    config = tmp_path / "cluster.yaml"
    config.write_text(yaml.safe_dump(_config(etcd, pki, tmp_path, WRONG, port)))
    log = tmp_path / "daemon.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(RUN + ["run", "--config", str(config), "--log-level", "debug"],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait(lambda: "authentication failed" in log.read_text(errors="replace")
              or proc.poll() is not None, "the refused authentication to be logged", log)
        status, body = _get(port, "/v1/status")
        r = _cli("status", "--config", str(config))
    finally:
        text = _stop(proc, log)
    assert "authentication failed" in text, text[-3000:]
    for what in (text, body, r.stdout, r.stderr):
        assert WRONG not in what and PASSWORD not in what, what[-3000:]
