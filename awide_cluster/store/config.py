"""Configuration of an ``EtcdStore``: endpoints, key prefix, deadlines, TLS, credentials."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from awide_cluster.store.credentials import CredentialFiles

# etcd refuses a request over --max-request-bytes (default 1.5 MiB), so one value is at most
# that; as base64 in a JSON answer it is 4/3 larger (2 MiB). 4 MiB holds any single-key
# answer of a default etcd with room to spare; larger answers (ranges) are read in pages.
MAX_ANSWER_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class TlsConfig:
    """CA to trust, and a client certificate when the members demand one."""

    ca_file: str
    cert_file: str | None = None
    key_file: str | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("TlsConfig: cert_file and key_file go together")

    def ssl_context(self) -> ssl.SSLContext:
        """A verifying client context (hostname checked against the certificate's SAN);
        ``CredentialError`` naming the file that cannot be used."""
        from awide_cluster.store.credentials import CredentialFiles, read_credentials
        ctx = read_credentials(CredentialFiles(self.ca_file, self.cert_file, self.key_file)).ssl
        assert ctx is not None
        return ctx


@dataclass(frozen=True)
class StoreConfig:
    """``endpoints``: client URLs (``http://127.0.0.1:2379``, ``https://[::1]:2379``).

    ``prefix``: every key given to or returned by the store is relative to it.
    ``call_timeout``: default deadline of a whole call (hedges and endpoint rotation included).
    ``hedge_after``: a read not answered after this long is also sent to the next endpoint.
    ``max_answer_bytes``: the most any one answer (or one watch message) may hold; a larger
    one is refused while it streams in (``TooLarge``). Calls may ask for less, never more.
    """

    endpoints: tuple[str, ...]
    prefix: str
    call_timeout: float = 0.5
    hedge_after: float = 0.05
    tls: TlsConfig | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)     # never in a repr or a log
    # where the password was read from: read again by ``EtcdStore.reload_credentials``
    password_file: str | None = None
    max_answer_bytes: int = MAX_ANSWER_BYTES

    def __post_init__(self) -> None:
        if isinstance(self.endpoints, str):
            raise ValueError("StoreConfig.endpoints: a tuple of URLs, not one string")
        eps = tuple(e.rstrip("/") for e in self.endpoints)
        if not eps:
            raise ValueError("StoreConfig.endpoints: at least one endpoint")
        for i, e in enumerate(eps):
            parts = urlsplit(e)
            if "@" in parts.netloc:      # never echo the URL: it carries credentials
                raise ValueError(f"StoreConfig.endpoints: endpoint {i} has credentials in the "
                                 "URL; give username and password instead")
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"StoreConfig.endpoints: not an http(s) URL: {e!r}")
            try:
                _ = parts.port          # raises for a port that is not a number in range
            except ValueError as exc:
                raise ValueError(f"StoreConfig.endpoints: bad port in {e!r}") from exc
            if parts.path or parts.query:
                raise ValueError(f"StoreConfig.endpoints: no path expected in {e!r}")
        if len(set(eps)) != len(eps):
            raise ValueError("StoreConfig.endpoints: duplicate endpoint")
        object.__setattr__(self, "endpoints", eps)
        if not (self.call_timeout > 0):
            raise ValueError("StoreConfig.call_timeout must be > 0")
        if not (self.hedge_after >= 0):
            raise ValueError("StoreConfig.hedge_after must be >= 0")
        if not (isinstance(self.max_answer_bytes, int) and self.max_answer_bytes >= 64 * 1024):
            raise ValueError("StoreConfig.max_answer_bytes must be an integer >= 65536")
        if (self.username is None) != (self.password is None):
            raise ValueError("StoreConfig: username and password go together")
        if self.password_file is not None and self.password is None:
            raise ValueError("StoreConfig: password_file without the password read from it")

    def credential_files(self) -> CredentialFiles:
        """The files the store's credentials are (re-)read from."""
        from awide_cluster.store.credentials import CredentialFiles
        t = self.tls
        return CredentialFiles(ca_file=t.ca_file if t else None,
                               cert_file=t.cert_file if t else None,
                               key_file=t.key_file if t else None,
                               password_file=self.password_file)
