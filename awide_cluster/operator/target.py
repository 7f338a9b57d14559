"""Which cluster an operator command talks to: one lookup for every command.

Where the etcd settings come from, the first that is given:

1. ``--config FILE`` on the command line;
2. ``--endpoints URL[,URL...]`` on the command line (the cluster from ``--cluster``);
3. the file named by ``$AWIDE_CONFIG``;
4. ``$AWIDE_ETCD_ENDPOINTS`` (the cluster from ``--cluster`` or ``$AWIDE_CLUSTER``);
5. ``DEFAULT_CONFIG`` (``/etc/awide-cluster/cluster.yaml``, what the rollout installs), when
   that file exists. ``$AWIDE_DEFAULT_CONFIG`` names another default (for tests and
   unusual installs).

The cluster name: ``--cluster`` when given, else the file's top-level ``cluster``. Giving both
``--config`` and ``--endpoints`` is a usage error.

The config parser (pydantic) is imported when a file or the options are read: a lookup that
names no cluster fails without it.

Both config files name the cluster (top-level ``cluster``) and its etcd (``etcd`` section, the
shared ``EtcdSection``); the operator commands read only those two settings (and a daemon
file's ``timing``, for how long to wait for an intent), so they work with either file (and
with a file of a newer version whose other sections they do not know).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from awide_cluster.config.errors import ConfigError
from awide_cluster.contract import keys

if TYPE_CHECKING:
    from awide_cluster.config.common import EtcdSection
    from awide_cluster.store.config import StoreConfig

DEFAULT_CONFIG = "/etc/awide-cluster/cluster.yaml"
DEFAULT_CONFIG_ENV = "AWIDE_DEFAULT_CONFIG"
CONFIG_ENV = "AWIDE_CONFIG"
ENDPOINTS_ENV = "AWIDE_ETCD_ENDPOINTS"
CLUSTER_ENV = "AWIDE_CLUSTER"
INTENT_WAIT = 10.0          # lease TTL 5 s + 5 polls of 1 s: the daemon defaults


class NoTarget(Exception):
    """No cluster was named and no default config exists (a usage error: exit 64)."""


@dataclass(frozen=True, slots=True)
class ClusterTarget:
    cluster: str
    etcd: EtcdSection
    source: str = ""            # where the settings came from, for messages
    kind: str = ""              # "daemon" or "gateway" (a config file), "" (the options)
    intent_wait: float = INTENT_WAIT    # how long an intent may take (a daemon file's timing)
    hosts: tuple[str, ...] = ()         # a daemon file's hosts (the cluster's daemons)

    def store_config(self) -> StoreConfig:
        from awide_cluster.store.build import store_config  # the store (aiohttp): when used
        return store_config(self.etcd, self.cluster)

    def with_call_timeout(self, call_timeout: float | None) -> ClusterTarget:
        if call_timeout is None:
            return self
        etcd = self.etcd.model_copy(update={
            "call_timeout": call_timeout,
            "hedge_after": min(self.etcd.hedge_after, call_timeout / 2)})
        return ClusterTarget(self.cluster, etcd, self.source, self.kind, self.intent_wait,
                             self.hosts)


def default_config(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    return env.get(DEFAULT_CONFIG_ENV) or DEFAULT_CONFIG


def _cluster_name(file: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(file, "cluster", "missing: the file must name its cluster")
    try:
        return keys.check_name("cluster", value)
    except keys.BadName as e:
        raise ConfigError(file, "cluster", str(e)) from None


def _intent_wait(data: dict[str, Any]) -> float:
    """lease TTL + 5 polls from a daemon file's ``timing`` (the defaults otherwise)."""
    timing = data.get("timing")
    if not isinstance(timing, dict):
        return INTENT_WAIT
    ttl, poll = timing.get("lease_ttl", 5), timing.get("poll_interval", 1.0)
    ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 600
             for v in (ttl, poll))
    return float(ttl + 5 * poll) if ok else INTENT_WAIT


def from_config_file(path: str | Path, *, source: str = "") -> ClusterTarget:
    from awide_cluster.config.common import EtcdSection, config_kind, parse, read_yaml
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
    kind = config_kind(data) or ""
    wait = _intent_wait(data) if kind == "daemon" else INTENT_WAIT
    hosts = data.get("hosts") if kind == "daemon" else None
    names = tuple(h for h in hosts if isinstance(h, str)) if isinstance(hosts, list) else ()
    return ClusterTarget(cluster, etcd, source or name, kind, wait, names)


def from_options(cluster: str, endpoints: list[str], call_timeout: float | None,
                 *, source: str = "--endpoints") -> ClusterTarget:
    from awide_cluster.config.common import EtcdSection, parse
    data: dict[str, Any] = {"endpoints": endpoints}
    if call_timeout is not None:
        data["call_timeout"] = call_timeout
        data["hedge_after"] = min(0.05, call_timeout / 2)
    etcd = parse(data, EtcdSection, source)
    return ClusterTarget(_cluster_name("--cluster", cluster), etcd, source)


def _split(endpoints: str) -> list[str]:
    return [e.strip() for e in endpoints.split(",") if e.strip()]


def lookup(*, config: str | None = None, endpoints: str | None = None,
           cluster: str | None = None, call_timeout: float | None = None,
           env: Mapping[str, str] | None = None) -> ClusterTarget:
    """The target from the command line's ``--config``/``--endpoints``/``--cluster`` and the
    environment, in the order of the module's docstring. Raises ``NoTarget`` (nothing names a
    cluster), ``ConfigError`` (a bad file, a bad name or endpoint) and ``ValueError`` (both
    ``--config`` and ``--endpoints``)."""
    env = os.environ if env is None else env
    if config and endpoints:
        raise ValueError("give --config FILE or --endpoints URLS, not both")
    if config:
        target = from_config_file(config, source=f"--config {config}")
    elif endpoints:
        if not cluster:
            raise NoTarget("--endpoints needs --cluster NAME (which cluster's keys to read)")
        return from_options(cluster, _split(endpoints), call_timeout)
    elif env.get(CONFIG_ENV):
        path = env[CONFIG_ENV]
        target = from_config_file(path, source=f"${CONFIG_ENV}={path}")
    elif env.get(ENDPOINTS_ENV):
        name = cluster or env.get(CLUSTER_ENV)
        if not name:
            raise NoTarget(f"${ENDPOINTS_ENV} needs --cluster NAME or ${CLUSTER_ENV}")
        return from_options(name, _split(env[ENDPOINTS_ENV]), call_timeout,
                            source=f"${ENDPOINTS_ENV}")
    else:
        path = default_config(env)
        if not Path(path).exists():
            raise NoTarget(
                f"say which cluster: --config FILE (a daemon or gateway config), "
                f"--endpoints URL[,URL...] with --cluster NAME, or ${CONFIG_ENV}; the "
                f"default {path} does not exist on this host")
        target = from_config_file(path, source=path)
    if cluster and cluster != target.cluster:
        target = ClusterTarget(_cluster_name("--cluster", cluster), target.etcd,
                               f"{target.source} --cluster {cluster}", target.kind,
                               target.intent_wait)
    return target.with_call_timeout(call_timeout)
