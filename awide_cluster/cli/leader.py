"""``awide-cluster leader switchover [--to HOST]``: move leadership with no registry gap and
no card out (``daemon/switchover.py``). Exit codes as the intents': 0 moved; 1 refused (no
leader, the target not a live candidate, the leader refused it) or not done within the bound;
3 etcd unreachable; 64 usage; 78 config error."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from awide_cluster.cli.daemon import _check_reason, _store_failure
from awide_cluster.cli.lookup import EXIT_OK, EXIT_UNHEALTHY, resolve, target_options
from awide_cluster.cli.main import cli

if TYPE_CHECKING:
    from awide_cluster.operator.target import ClusterTarget
    from awide_cluster.store.config import StoreConfig


@cli.group("leader")
def leader_group() -> None:
    """The leader daemon (the one that writes the registry)."""


@leader_group.command("switchover")
@click.option("--to", "to", default="", metavar="HOST",
              help="the host to lead next (a live daemon of the cluster); default: any other "
                   "live one")
@target_options
@click.option("--reason", default=None, metavar="TEXT",
              help="why (recorded in the history with who)")
@click.option("--wait", "wait", type=float, default=None,
              help="seconds to wait for the new leader [default: lease TTL + 5 polls of a "
                   "daemon config, else 10]")
def switchover_command(to: str, config: str | None, endpoints: str | None,
                       cluster: str | None, call_timeout: float | None, reason: str | None,
                       wait: float | None) -> None:
    """Hand leadership over to another daemon, fenced: the leader answers after a cycle that
    left the registry current, deletes its key and names the next leader in the same
    transaction; only that host campaigns. Refused (nothing written) when HOST is not a
    live candidate."""
    import asyncio
    reason = _check_reason(reason)
    target, store_config = resolve(config, endpoints, cluster, call_timeout)
    wait = target.intent_wait if wait is None else wait
    sys.exit(asyncio.run(_switchover(target, store_config, to, wait, reason or "")))


async def _switchover(target: ClusterTarget, store_config: StoreConfig, to: str, wait: float,
                      reason: str) -> int:
    from awide_cluster.daemon.clock import SystemClock
    from awide_cluster.daemon.switchover import SwitchoverError, submit
    from awide_cluster.store.errors import StoreError
    from awide_cluster.store.etcd import EtcdStore
    store = EtcdStore(store_config)
    try:
        moved = await submit(store, to=to, hosts=target.hosts, clock=SystemClock(), wait=wait,
                             poll=min(0.2, store_config.call_timeout),
                             call_timeout=store_config.call_timeout, reason=reason)
    except SwitchoverError as e:
        click.echo(f"awide-cluster: leader switchover: {e}", err=True)
        return EXIT_UNHEALTHY
    except StoreError as e:
        return _store_failure("leader switchover", to or "", e)
    finally:
        await store.close()
    click.echo(f"leadership moved from {moved.before} to {moved.after} in "
               f"{moved.seconds:.2f} s")
    return EXIT_OK
