"""A throw-away PKI for TLS tests and the demo: one CA, a server and a client certificate.

Made with the ``openssl`` program (list arguments, bounded), ECDSA P-256, valid for a few days.
The server certificate names the loopback addresses and ``localhost`` and may also be used as a
client certificate (etcd members and health probes use it both ways).
"""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

_OPENSSL_TIMEOUT = 20.0

_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = {cn}
[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[v3_server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = {san}
[v3_client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
"""


class PkiError(RuntimeError):
    """openssl failed or is missing."""


@dataclass(frozen=True)
class TestPki:
    __test__ = False  # not a pytest test class

    ca_file: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str


def make_test_pki(
    directory: str | Path,
    *,
    hosts: tuple[str, ...] = ("127.0.0.1", "::1", "localhost"),
    client_cn: str = "awide-client",
    days: int = 7,
    openssl: str = "openssl",
) -> TestPki:
    """Create ``ca.crt``, ``server.{crt,key}`` and ``client.{crt,key}`` in ``directory``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    san = ", ".join(_san_entry(h) for h in hosts)

    def run(args: list[str]) -> None:
        try:
            done = subprocess.run(
                [openssl, *args], cwd=d, capture_output=True, timeout=_OPENSSL_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PkiError(f"openssl {args[0]}: {exc}") from exc
        if done.returncode != 0:
            why = done.stderr.decode(errors="replace")
            raise PkiError(f"openssl {' '.join(args)} failed: {why}")

    def config(cn: str) -> str:
        path = d / f"{cn}.cnf"
        path.write_text(_CONFIG.format(cn=cn, san=san))
        return str(path)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run(["req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", str(days),
         "-config", config("awide-test-ca"), "-extensions", "v3_ca"])
    for name, cn, ext in (("server", "etcd-server", "v3_server"),
                          ("client", client_cn, "v3_client")):
        cnf = config(cn)
        run(["req", "-new", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-config", cnf])
        run(["x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-set_serial", str(secrets.randbits(63)), "-days", str(days), "-out", f"{name}.crt",
             "-extfile", cnf, "-extensions", ext])
    return TestPki(
        ca_file=str(d / "ca.crt"),
        server_cert=str(d / "server.crt"), server_key=str(d / "server.key"),
        client_cert=str(d / "client.crt"), client_key=str(d / "client.key"),
    )


def _san_entry(host: str) -> str:
    if host.replace(".", "").isdigit() or ":" in host:
        return f"IP:{host}"
    return f"DNS:{host}"
