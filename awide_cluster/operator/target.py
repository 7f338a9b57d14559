"""Which cluster status reads: from a daemon or gateway config file, or from the command line.

Both config files name the cluster (top-level ``cluster``) and its etcd (``etcd`` section, the
shared ``EtcdSection``); status reads only those two settings, so it works with either file
(and with a file of a newer version whose other sections it does not know).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


from awide_cluster.config.common import ConfigError, EtcdSection, parse, read_yaml
from awide_cluster.contract import keys
from awide_cluster.store.config import StoreConfig


@dataclass(frozen=True, slots=True)
class ClusterTarget:
    cluster: str
    etcd: EtcdSection

    def store_config(self) -> StoreConfig:
        return self.etcd.store_config(self.cluster)


def _cluster_name(file: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(file, "cluster", "missing: the file must name its cluster")
    try:
        return keys.check_name("cluster", value)
    except keys.BadName as e:
        raise ConfigError(file, "cluster", str(e)) from None


def from_config_file(path: str | Path) -> ClusterTarget:
    name = str(path)
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(name, "-", "the file must hold a YAML mapping of settings")
    cluster = _cluster_name(name, data.get("cluster"))
    if "etcd" not in data:
        raise ConfigError(name, "etcd", "missing: the file must give the etcd endpoints")
    try:
        etcd = parse(data["etcd"], EtcdSection, name)
    except ConfigError as e:
        raise ConfigError(name, f"etcd.{e.field}" if e.field != "-" else "etcd", e.reason) \
            from None
    return ClusterTarget(cluster, etcd)


def from_options(cluster: str, endpoints: list[str], call_timeout: float | None) -> ClusterTarget:
    name = "--endpoints"
    data: dict[str, Any] = {"endpoints": endpoints}
    if call_timeout is not None:
        data["call_timeout"] = call_timeout
        data["hedge_after"] = min(0.05, call_timeout / 2)
    etcd = parse(data, EtcdSection, name)
    return ClusterTarget(_cluster_name("--cluster", cluster), etcd)
