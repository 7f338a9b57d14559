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


def _openssl(d: Path, args: list[str], openssl: str) -> None:
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


_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _issue(d: Path, name: str, cn: str, ext: str, san: str, days: int, openssl: str) -> None:
    """``name.crt``/``name.key`` for ``cn``, signed by ``ca.crt``/``ca.key`` in ``d``."""
    cnf = d / f"{name}.cnf"
    cnf.write_text(_CONFIG.format(cn=cn, san=san))
    _openssl(d, ["req", "-new", *_EC, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-config", str(cnf)], openssl)
    _openssl(d, ["x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-set_serial", str(secrets.randbits(63)), "-days", str(days),
                 "-out", f"{name}.crt", "-extfile", str(cnf), "-extensions", ext], openssl)


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
    cnf = d / "awide-test-ca.cnf"
    cnf.write_text(_CONFIG.format(cn="awide-test-ca", san=san))
    _openssl(d, ["req", "-x509", *_EC, "-keyout", "ca.key", "-out", "ca.crt", "-days",
                 str(days), "-config", str(cnf), "-extensions", "v3_ca"], openssl)
    _issue(d, "server", "etcd-server", "v3_server", san, days, openssl)
    _issue(d, "client", client_cn, "v3_client", san, days, openssl)
    return TestPki(
        ca_file=str(d / "ca.crt"),
        server_cert=str(d / "server.crt"), server_key=str(d / "server.key"),
        client_cert=str(d / "client.crt"), client_key=str(d / "client.key"),
    )


def client_certificate(pki: TestPki, cn: str, *, days: int = 7,
                       openssl: str = "openssl") -> tuple[str, str]:
    """A client certificate with Common Name ``cn`` (etcd's user name under client-certificate
    authentication), signed by ``pki``'s CA: ``(cert_file, key_file)`` next to its CA."""
    d = Path(pki.ca_file).parent
    name = "client-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in cn)
    _issue(d, name, cn, "v3_client", "DNS:localhost", days, openssl)
    return str(d / f"{name}.crt"), str(d / f"{name}.key")


def _san_entry(host: str) -> str:
    if host.replace(".", "").isdigit() or ":" in host:
        return f"IP:{host}"
    return f"DNS:{host}"
