"""What every operator command shares: which cluster (``operator.target.lookup``), the exit
codes, and the "no such cluster" diagnosis.

Exit codes of the operator commands, the Nagios plugin convention for the checks (status,
cards) and sysexits' codes for the errors of use (docs/operations.md, "Exit codes"):

- ``0`` OK / done;
- ``1`` WARNING: a state an operator set (a drained card, a pending intent, a dev cluster), a
  daemon or an etcd member down with quorum kept; (drain/undrain/forget) not done: refused,
  declined, not applied in time;
- ``2`` CRITICAL: a problem of severity error (a card out, quorum lost, ...);
- ``3`` UNKNOWN: etcd unreachable, no member answered;
- ``64`` usage error (``EX_USAGE``): a bad option, no cluster named, no such cluster in that
  etcd, a confirmation needed where no terminal can give it;
- ``78`` config error (``EX_CONFIG``): a bad or wrong kind of config file, bad etcd settings.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import click

if TYPE_CHECKING:
    from awide_cluster.operator.target import ClusterTarget
    from awide_cluster.store.config import StoreConfig

# Every subcommand module imports this one when ``awide-cluster`` starts: what the commands
# need to run (the config parser, the store, the operator's model) is imported by the command
# that runs, so ``--help`` and a usage error load none of it.

EXIT_OK, EXIT_WARNING, EXIT_CRITICAL, EXIT_UNKNOWN = 0, 1, 2, 3     # Nagios plugins
EXIT_USAGE, EXIT_CONFIG = 64, 78                                    # sysexits.h
EXIT_UNHEALTHY = EXIT_WARNING       # an action not done (drain, undrain, forget, backup, ...)
EXIT_UNREACHABLE = EXIT_UNKNOWN


def target_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--config``, ``--endpoints``, ``--cluster``, ``--call-timeout``: which cluster."""
    opts = [
        click.option("--config", "-c", type=click.Path(dir_okay=False), default=None,
                     help="a daemon or gateway config file naming the cluster and its etcd "
                          "[default: $AWIDE_CONFIG, else /etc/awide-cluster/cluster.yaml]"),
        click.option("--endpoints", default=None,
                     help="etcd client URLs, comma-separated, instead of a config file "
                          "[$AWIDE_ETCD_ENDPOINTS]"),
        click.option("--cluster", default=None,
                     help="cluster name (with --endpoints; with a config file: another "
                          "cluster on the same etcd) [$AWIDE_CLUSTER with endpoints]"),
        click.option("--call-timeout", type=click.FloatRange(0.02, 10.0), default=None,
                     help="bound of each etcd call, seconds (default: the config's, 0.5)"),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def fail(message: str, code: int) -> NoReturn:
    click.echo(f"awide-cluster: {message}", err=True)
    sys.exit(code)


def resolve(config: str | None, endpoints: str | None, cluster: str | None,
            call_timeout: float | None) -> tuple[ClusterTarget, StoreConfig]:
    """The target and its store config, or exit 64 (usage) or 78 (config) with one line
    saying why."""
    import ssl

    from awide_cluster.config.errors import ConfigError
    from awide_cluster.operator.target import NoTarget, lookup
    try:
        target = lookup(config=config, endpoints=endpoints, cluster=cluster,
                        call_timeout=call_timeout)
    except (NoTarget, ValueError) as e:             # nothing named, or two ways at once
        fail(str(e), EXIT_USAGE)
    except ConfigError as e:                        # a file, or what the options gave
        from_options = e.file.startswith(("--", "$"))
        fail(f"{'usage' if from_options else 'config'} error: {e}",
             EXIT_USAGE if from_options else EXIT_CONFIG)
    try:
        store_config = target.store_config()
        if store_config.tls is not None:
            store_config.tls.ssl_context()          # unreadable certificate: exit 78 now
    except ConfigError as e:
        fail(f"config error: {e}", EXIT_CONFIG)
    except (ssl.SSLError, OSError, ValueError) as e:
        fail(f"etcd settings: {e}", EXIT_CONFIG)
    warning = target.etcd.plaintext_warning()
    if warning:
        click.echo(f"awide-cluster: {warning}", err=True)
    return target, store_config


def no_such_cluster(target: ClusterTarget, found: str) -> str:
    return (f"no such cluster {target.cluster!r} in this etcd (nothing under "
            f"/awide/{target.cluster}/; cluster from {target.source}); clusters found: {found}")


async def cluster_list(store_config: StoreConfig) -> str:
    """The cluster names under /awide/, described; what went wrong when they cannot be read."""
    from awide_cluster.operator.clusters import cluster_names
    from awide_cluster.store.errors import StoreError
    try:
        names = await cluster_names(store_config, timeout=2 * store_config.call_timeout + 1.0)
    except (StoreError, TimeoutError) as e:
        return f"? (cannot list them: {type(e).__name__}: {e})"
    return names.describe()


def config_file(given: str | None, *, kind: str) -> str:
    """The config file of ``check-config``/``run`` (``kind`` "daemon": FILE or --config, then
    $AWIDE_CONFIG, then /etc/awide-cluster/cluster.yaml) or of the gateway commands
    (``kind`` "gateway": FILE or --config, then $AWIDE_CONFIG; no default path: a gateway's
    file lives with its engine). Exit 64 when none is given or found."""
    import os
    from pathlib import Path

    from awide_cluster.operator.target import CONFIG_ENV, default_config
    if given:
        return given
    if os.environ.get(CONFIG_ENV):
        return os.environ[CONFIG_ENV]
    if kind == "daemon":
        path = default_config()
        if Path(path).exists():
            return path
        fail(f"say which config file: FILE, or ${CONFIG_ENV}; the default {path} does not "
             "exist on this host", EXIT_USAGE)
    fail(f"say which gateway config file: FILE (--config FILE), or ${CONFIG_ENV}", EXIT_USAGE)
