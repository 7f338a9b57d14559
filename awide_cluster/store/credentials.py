"""Credentials read from files: the CA to trust, a client certificate and key, a password.

Read at start and again on reload (SIGHUP). ``read_credentials`` checks every file before any
of it is used: a file that is unreadable, empty, too large, not PEM, an encrypted key, or a
key that does not belong to its certificate raises ``CredentialError`` naming the file, and
the caller keeps the credentials it has. The checks of a file's content are pure functions
(``pem_problem``, ``password_problem``); building the TLS context is the thin shell around
them.
"""

from __future__ import annotations

import hashlib
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

# a CA bundle of a few dozen certificates, a key, a password: far below this
MAX_CREDENTIAL_BYTES = 1024 * 1024

_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END ([A-Z0-9 ]+)-----",
                    re.DOTALL)
_BASE64 = re.compile(rb"^[A-Za-z0-9+/=\s]*$")
_HEADERS = re.compile(rb"^[A-Za-z-]+:.*$", re.MULTILINE)

Kind = Literal["certificate", "key"]


class CredentialError(ValueError):
    """A credential file that cannot be used. ``file`` names it, ``reason`` says why."""

    def __init__(self, file: str, reason: str) -> None:
        super().__init__(f"{file}: {reason}")
        self.file, self.reason = file, reason


def pem_problem(data: bytes, kind: Kind) -> str | None:
    """Why ``data`` is not a usable PEM file of ``kind``, or None when it is.

    A certificate file holds one or more ``CERTIFICATE`` blocks (a CA bundle, or a chain); a
    key file one unencrypted ``PRIVATE KEY`` block (PKCS#8, ``EC`` or ``RSA``)."""
    if not data.strip():
        return "empty"
    if len(data) > MAX_CREDENTIAL_BYTES:
        return f"{len(data)} bytes, over the bound of {MAX_CREDENTIAL_BYTES}"
    begins = data.count(b"-----BEGIN ")
    blocks = list(_BLOCK.finditer(data))
    if not begins:
        wanted = "CERTIFICATE" if kind == "certificate" else "PRIVATE KEY"
        return f"not PEM (no -----BEGIN {wanted}----- line)"
    if len(blocks) != begins:
        return "a PEM block is not closed (truncated file?)"
    for b in blocks:
        label, body, end = b.group(1), b.group(2), b.group(3)
        if label != end:
            return f"PEM block BEGIN {label.decode()} ends with END {end.decode()}"
        if b"Proc-Type: 4,ENCRYPTED" in body or label == b"ENCRYPTED PRIVATE KEY":
            return "an encrypted key (no passphrase can be given): store it unencrypted, 0600"
        if not _BASE64.match(_HEADERS.sub(b"", body)) or not body.strip():
            return f"PEM block {label.decode()} is not base64"
    labels = [b.group(1) for b in blocks]
    if kind == "certificate":
        if b"CERTIFICATE" not in labels:
            return "holds no CERTIFICATE block"
        if any(lbl.endswith(b"PRIVATE KEY") for lbl in labels):
            return "holds a private key: give the key in its own file"
        return None
    keys = [lbl for lbl in labels if lbl.endswith(b"PRIVATE KEY")]
    if not keys:
        return "holds no PRIVATE KEY block"
    if len(keys) > 1:
        return f"holds {len(keys)} private keys, expected one"
    return None


def password_problem(data: bytes) -> str | None:
    """Why ``data`` is not a usable password file (one line of UTF-8), or None."""
    if len(data) > 4096:
        return "over 4096 bytes: not a password file"
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return "not UTF-8 text"
    text = text.strip()
    if not text:
        return "empty"
    if "\n" in text or "\r" in text:
        return "more than one line"
    return None


@dataclass(frozen=True)
class CredentialFiles:
    """Where the credentials are read from. ``ca_file`` None: no TLS."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    password_file: str | None = None

    def names(self) -> tuple[str, ...]:
        return tuple(f for f in (self.ca_file, self.cert_file, self.key_file, self.password_file)
                     if f is not None)


@dataclass(frozen=True)
class Credentials:
    """What was read: a verifying client TLS context (or None), the password (never shown),
    and a digest of every file read (to tell whether a reload changed anything)."""

    ssl: ssl.SSLContext | None
    password: str | None = field(default=None, repr=False)
    digest: str = ""


def _read(path: str) -> bytes:
    p = Path(path)
    try:
        with p.open("rb") as f:
            data = f.read(MAX_CREDENTIAL_BYTES + 1)
    except OSError as e:
        raise CredentialError(path, f"cannot read: {e.strerror or e}") from None
    return data


def checked_pem(path: str, kind: Kind) -> bytes:
    """The content of a PEM file of ``kind``; ``CredentialError`` naming it when unusable."""
    data = _read(path)
    why = pem_problem(data, kind)
    if why is not None:
        raise CredentialError(path, why)
    return data


def read_credentials(files: CredentialFiles) -> Credentials:
    """Read and check every file; ``CredentialError`` naming the first that is bad."""
    digest = hashlib.sha256()
    ctx = None
    if files.ca_file is not None:
        ca = checked_pem(files.ca_file, "certificate")
        digest.update(ca)
        try:
            ctx = ssl.create_default_context(cadata=ca.decode("ascii", errors="replace"))
        except (ssl.SSLError, ValueError) as e:
            raise CredentialError(files.ca_file, f"not a CA certificate bundle: {e}") from None
        if (files.cert_file is None) != (files.key_file is None):
            raise CredentialError(files.cert_file or files.key_file or "-",
                                  "a certificate and its key go together")
        if files.cert_file is not None and files.key_file is not None:
            cert = checked_pem(files.cert_file, "certificate")
            key = checked_pem(files.key_file, "key")
            digest.update(cert)
            digest.update(key)
            try:
                ctx.load_cert_chain(files.cert_file, files.key_file)
            except ssl.SSLError as e:
                if "mismatch" in str(e).lower():
                    raise CredentialError(files.key_file, "does not match the certificate "
                                                          f"{files.cert_file}") from None
                raise CredentialError(files.cert_file, f"cannot load with its key "
                                                       f"{files.key_file}: {e}") from None
            except OSError as e:
                raise CredentialError(files.cert_file, f"cannot read: {e.strerror or e}") \
                    from None
    password = None
    if files.password_file is not None:
        data = _read(files.password_file)
        why = password_problem(data)
        if why is not None:
            raise CredentialError(files.password_file, why)
        password = data.decode().strip()
        digest.update(data)
    return Credentials(ssl=ctx, password=password, digest=digest.hexdigest()[:16])


def server_context(cert_file: str, key_file: str, client_ca_file: str) -> ssl.SSLContext:
    """A TLS server context that demands a client certificate signed by ``client_ca_file``
    (TLS 1.2 at least); ``CredentialError`` naming the file that cannot be used."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    load_server_files(ctx, cert_file, key_file, client_ca_file)
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def load_server_files(ctx: ssl.SSLContext, cert_file: str, key_file: str,
                      client_ca_file: str) -> None:
    """Load the certificate, key and client CA into ``ctx`` (new handshakes use them);
    every file is checked first, so a bad one changes nothing."""
    checked_pem(cert_file, "certificate")
    checked_pem(key_file, "key")
    ca = checked_pem(client_ca_file, "certificate")
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        probe.load_cert_chain(cert_file, key_file)
    except ssl.SSLError as e:
        if "mismatch" in str(e).lower():
            raise CredentialError(key_file, f"does not match the certificate {cert_file}") \
                from None
        raise CredentialError(cert_file, f"cannot load with its key {key_file}: {e}") from None
    except OSError as e:
        raise CredentialError(cert_file, f"cannot read: {e.strerror or e}") from None
    try:
        probe.load_verify_locations(cadata=ca.decode("ascii", errors="replace"))
    except (ssl.SSLError, ValueError) as e:
        raise CredentialError(client_ca_file, f"not a CA certificate bundle: {e}") from None
    ctx.load_cert_chain(cert_file, key_file)
    ctx.load_verify_locations(cadata=ca.decode("ascii", errors="replace"))
