"""``awide-cluster status`` and ``awide-cluster cards``: the cluster at one look.

Exit codes (for scripts): 0 healthy, 1 unhealthy (or etcd unreachable), 2 usage or config
error. Shell completion comes from click::

    eval "$(_AWIDE_CLUSTER_COMPLETE=bash_source awide-cluster)"     # bash
    eval "$(_AWIDE_CLUSTER_COMPLETE=zsh_source awide-cluster)"      # zsh
"""

from __future__ import annotations

import asyncio
import ssl
import sys
from collections.abc import Callable

import click

from awide_cluster.cli.main import cli
from awide_cluster.config.common import ConfigError
from awide_cluster.operator.gather import StatusReader
from awide_cluster.operator.model import ClusterStatus
from awide_cluster.operator.render import FORMATS, render, render_cards
from awide_cluster.operator.status import RawSnapshot, StatusPolicy
from awide_cluster.operator.target import ClusterTarget, from_config_file, from_options
from awide_cluster.store.etcd import EtcdStore

EXIT_HEALTHY, EXIT_UNHEALTHY, EXIT_USAGE = 0, 1, 2
CARD_CODES = {"card_out", "card_conflict", "card_unplaced", "registry_corrupt",
              "registry_missing", "keys_unreadable", "slot_table_mismatch"}


def _target(config: str | None, endpoints: str | None, cluster: str | None,
            call_timeout: float | None) -> ClusterTarget:
    if config and (endpoints or cluster):
        raise click.UsageError("give --config, or --endpoints with --cluster, not both")
    if config:
        target = from_config_file(config)
        if call_timeout is not None:
            target = ClusterTarget(target.cluster, target.etcd.model_copy(
                update={"call_timeout": call_timeout,
                        "hedge_after": min(target.etcd.hedge_after, call_timeout / 2)}))
        return target
    if not endpoints or not cluster:
        raise click.UsageError(
            "say which cluster: --config FILE (a daemon or gateway config), or --endpoints "
            "URL[,URL...] with --cluster NAME")
    return from_options(cluster, [e.strip() for e in endpoints.split(",") if e.strip()],
                        call_timeout)


def _unreachable_line(raw: RawSnapshot, call_timeout: float) -> str:
    first = next((a.error for a in raw.answers if a.error), raw.read_error)
    eps = ", ".join(raw.endpoints)
    return (f"etcd unreachable: no member of {eps} answered (call bound {call_timeout:g} s; "
            f"first error: {first})")


def _options(f: Callable) -> Callable:
    opts = [
        click.option("--config", "-c", type=click.Path(dir_okay=False), envvar="AWIDE_CONFIG",
                     help="daemon or gateway config file naming the cluster and its etcd"),
        click.option("--endpoints", envvar="AWIDE_ETCD_ENDPOINTS",
                     help="etcd client URLs, comma-separated (with --cluster)"),
        click.option("--cluster", envvar="AWIDE_CLUSTER", help="cluster name (with --endpoints)"),
        click.option("--call-timeout", type=click.FloatRange(0.02, 10.0), default=None,
                     help="bound of each etcd call, seconds (default: the config's, 0.5)"),
        click.option("--format", "-o", "fmt", type=click.Choice(FORMATS), default="table",
                     show_default=True),
        click.option("--watch", "-w", type=click.FloatRange(0.2, 3600), is_flag=False,
                     flag_value=2.0, default=None, metavar="[SECONDS]",
                     help="refresh in place every SECONDS (2 when not given); Ctrl-C stops"),
        click.option("--sample", type=click.FloatRange(0, 60), default=1.0, show_default=True,
                     help="one-shot: seconds between the two reads that measure report ages "
                          "(0: one read, ages unknown)"),
        click.option("--stale-after", type=click.FloatRange(0.1, 3600), default=3.0,
                     show_default=True,
                     help="a host report unchanged this long is stale; gateways may lag a "
                          "registry generation this young"),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def _run(config, endpoints, cluster, call_timeout, fmt, watch, sample, stale_after,
         strict: bool, what: Callable[[ClusterStatus, str], str],
         healthy: Callable[[ClusterStatus], bool]) -> None:
    try:
        target = _target(config, endpoints, cluster, call_timeout)
        store_config = target.store_config()
        if store_config.tls is not None:
            store_config.tls.ssl_context()          # unreadable certificate: exit 2 now
    except ConfigError as e:
        click.echo(f"awide-cluster: config error: {e}", err=True)
        sys.exit(EXIT_USAGE)
    except (ssl.SSLError, OSError, ValueError) as e:
        click.echo(f"awide-cluster: etcd settings: {e}", err=True)
        sys.exit(EXIT_USAGE)
    warning = target.etcd.plaintext_warning()
    if warning:
        click.echo(f"awide-cluster: {warning}", err=True)
    policy = StatusPolicy(stale_after=stale_after, behind_grace=stale_after)
    try:
        code = asyncio.run(_main(target, store_config, policy, fmt, watch, sample, strict,
                                 what, healthy))
    except KeyboardInterrupt:
        code = EXIT_UNHEALTHY
    sys.exit(code)


async def _main(target, store_config, policy, fmt, watch, sample, strict, what,
                healthy) -> int:
    store = EtcdStore(store_config)
    reader = StatusReader(store, cluster=target.cluster, endpoints=tuple(store_config.endpoints),
                          call_timeout=store_config.call_timeout, policy=policy)

    def verdict(st: ClusterStatus) -> int:
        ok = healthy(st) and not (strict and st.problems)
        return EXIT_HEALTHY if ok else EXIT_UNHEALTHY

    try:
        if watch is None:
            raw, st = await reader.sample(sample)
            if raw.unreachable:
                click.echo(f"awide-cluster: {_unreachable_line(raw, store_config.call_timeout)}", err=True)
                return EXIT_UNHEALTHY
            click.echo(what(st, fmt))
            return verdict(st)
        tty = sys.stdout.isatty()
        code = EXIT_UNHEALTHY
        try:
            while True:
                raw, st = await reader.snapshot()
                if raw.unreachable:
                    text = f"{_unreachable_line(raw, store_config.call_timeout)}   (retrying every {watch:g} s)"
                    code = EXIT_UNHEALTHY
                else:
                    text = what(st, fmt)
                    code = verdict(st)
                if tty:
                    click.echo("\x1b[H\x1b[2J" + text, nl=True)
                else:
                    click.echo(text + "\n")
                await asyncio.sleep(watch)
        except asyncio.CancelledError:
            return code
    finally:
        await store.close()


@cli.command()
@_options
@click.option("--strict", is_flag=True, help="warnings count as unhealthy too")
def status(config, endpoints, cluster, call_timeout, fmt, watch, sample, stale_after,
           strict) -> None:
    """The whole cluster at one look: etcd, leader, hosts, cards, gateways, problems.

    Exit code 0 when healthy, 1 when any problem of severity error is found (or etcd cannot
    be reached), 2 on a usage or config error.
    """
    _run(config, endpoints, cluster, call_timeout, fmt, watch, sample, stale_after, strict,
         render, lambda st: st.healthy)


@cli.command()
@_options
def cards(config, endpoints, cluster, call_timeout, fmt, watch, sample, stale_after) -> None:
    """The card table only: slot, id, serial, host, target, state, health, since, reason.

    Exit code 1 when a card is out, in conflict or without a slot, or the registry cannot be
    read.
    """
    _run(config, endpoints, cluster, call_timeout, fmt, watch, sample, stale_after, False,
         render_cards,
         lambda st: not any(p.code in CARD_CODES for p in st.errors))
