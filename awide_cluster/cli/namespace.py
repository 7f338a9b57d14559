"""``awide-cluster namespace migrate NS --algorithm N``: move a namespace to another placement
algorithm once every live gateway runs it (``operator/migrate.py``; docs/versions.md). Exit
codes as drain: 0 done (or already so); 1 refused (nothing written); 3 etcd unreachable; 64
usage; 78 config error."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from awide_cluster.cli.lookup import (
    EXIT_OK,
    EXIT_UNHEALTHY,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    fail,
    resolve,
    target_options,
)
from awide_cluster.cli.main import cli

if TYPE_CHECKING:
    from awide_cluster.store.config import StoreConfig


@cli.group("namespace")
def namespace_group() -> None:
    """A key namespace of the gateways (one per model configuration)."""


@namespace_group.command("migrate")
@click.argument("namespace", metavar="NAMESPACE")
@click.option("--algorithm", "algorithm", type=click.IntRange(1, 9999), required=True,
              help="the placement algorithm version to move the namespace to")
@target_options
def migrate_command(namespace: str, algorithm: int, config: str | None,
                    endpoints: str | None, cluster: str | None,
                    call_timeout: float | None) -> None:
    """Move NAMESPACE (layouts/NAMESPACE) to placement algorithm N: refused, nothing written,
    unless every live gateway says it runs N. The namespace's cache starts cold under N (its
    keys take a new prefix; the blocks placed by the old algorithm are never read); other
    namespaces keep their algorithm and their keys. Each gateway takes N at its next layout
    check (its next start)."""
    import asyncio

    from awide_cluster.contract.keys import BadName, check_name
    try:
        check_name("namespace", namespace)
    except BadName as e:
        fail(str(e), EXIT_USAGE)
    _, store_config = resolve(config, endpoints, cluster, call_timeout)
    sys.exit(asyncio.run(_migrate(store_config, namespace, algorithm)))


async def _migrate(store_config: StoreConfig, namespace: str, algorithm: int) -> int:
    from awide_cluster.operator.migrate import migrate
    from awide_cluster.store.errors import StoreError, Timeout, Unavailable
    from awide_cluster.store.etcd import EtcdStore
    store = EtcdStore(store_config)
    try:
        done = await migrate(store, namespace, algorithm,
                             call_timeout=store_config.call_timeout)
    except (Unavailable, Timeout) as e:
        click.echo(f"awide-cluster: namespace migrate {namespace}: etcd unreachable: {e}",
                   err=True)
        return EXIT_UNREACHABLE
    except StoreError as e:
        click.echo(f"awide-cluster: namespace migrate {namespace}: {type(e).__name__}: {e}",
                   err=True)
        return EXIT_UNHEALTHY
    finally:
        await store.close()
    if done.outcome == "refused":
        click.echo(f"awide-cluster: namespace migrate {namespace}: {done.message}", err=True)
        return EXIT_UNHEALTHY
    click.echo(done.message)
    return EXIT_OK
