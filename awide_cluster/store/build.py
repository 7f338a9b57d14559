"""Building a store from a config file's ``etcd:`` section: the one implementation that each
program's composition root (the daemon's, the CLI's, the gateway's) calls.

The section is described here by what the store needs of it (``EtcdSettings``), so that the
config package stays free of the store and the store free of the config package: the config's
``EtcdSection`` fits it as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from awide_cluster.contract.keys import prefix
from awide_cluster.store.config import StoreConfig, TlsConfig
from awide_cluster.store.etcd import EtcdStore


class TlsSettings(Protocol):
    @property
    def ca_file(self) -> Path: ...
    @property
    def cert_file(self) -> Path | None: ...
    @property
    def key_file(self) -> Path | None: ...


class EtcdSettings(Protocol):
    """What a store is built from: the ``etcd:`` section of a daemon's or a gateway's file."""

    @property
    def endpoints(self) -> Sequence[str]: ...
    @property
    def call_timeout(self) -> float: ...
    @property
    def hedge_after(self) -> float: ...
    @property
    def tls(self) -> TlsSettings | None: ...
    @property
    def username(self) -> str | None: ...
    @property
    def password_file(self) -> Path | None: ...

    def resolved_password(self) -> str | None: ...


def store_config(section: EtcdSettings, cluster: str) -> StoreConfig:
    """The store config of ``section`` for ``cluster`` (keys under its prefix)."""
    tls = None
    if section.tls is not None:
        t = section.tls
        tls = TlsConfig(ca_file=str(t.ca_file),
                        cert_file=str(t.cert_file) if t.cert_file else None,
                        key_file=str(t.key_file) if t.key_file else None)
    password = section.resolved_password()
    return StoreConfig(
        endpoints=tuple(section.endpoints), prefix=prefix(cluster),
        call_timeout=section.call_timeout, hedge_after=section.hedge_after, tls=tls,
        username=section.username if password is not None else None, password=password,
        password_file=str(section.password_file) if section.password_file is not None else None)


def store_from(section: EtcdSettings, cluster: str) -> EtcdStore:
    """The ``EtcdStore`` that ``section`` describes for ``cluster``."""
    return EtcdStore(store_config(section, cluster))
