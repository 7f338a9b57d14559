"""``awide-cluster run | check-config | drain | undrain | forget``.

Exit codes: 0 done; 1 failed (etcd unreachable, intent not applied in time, unknown card);
2 invalid config file (``FILE: field: reason`` on stderr, before anything touches etcd);
3 (run) the etcd cluster has fewer than 3 members and the config does not say dev_cluster.
"""

from __future__ import annotations

import asyncio
import logging
import sys

import click

from awide_cluster.cli.main import cli
from awide_cluster.config import daemon as daemon_config
from awide_cluster.config.common import ConfigError

EXIT_CONFIG = 2


def _load(path: str) -> daemon_config.DaemonConfig:
    try:
        return daemon_config.load(path)
    except ConfigError as e:
        click.echo(str(e), err=True)
        sys.exit(EXIT_CONFIG)


def _logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper()), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@cli.command("check-config")
@click.argument("file", type=click.Path(dir_okay=False))
def check_config(file: str) -> None:
    """Check a daemon config file; exit 2 with FILE: field: reason if it is bad."""
    cfg = _load(file)
    click.echo(f"{file}: ok (cluster {cfg.cluster}, host {cfg.host}, {cfg.role}, "
               f"{len(cfg.cards)} card(s){', DEVELOPMENT cluster' if cfg.dev_cluster else ''})")
    warning = cfg.etcd.plaintext_warning()
    if warning:
        click.echo(f"{file}: {warning}", err=True)


@cli.command("run")
@click.option("--config", "config", required=True, type=click.Path(dir_okay=False),
              help="the daemon config file (YAML)")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
def run(config: str, log_level: str) -> None:
    """Run the daemon: report this host's cards, take part in leader election, and as leader
    keep the card registry. SIGTERM stops cleanly (lease revoked), SIGHUP reloads."""
    cfg = _load(config)                   # a bad file stops here, before etcd is touched
    _logging(log_level)
    warning = cfg.etcd.plaintext_warning()
    if warning:
        logging.getLogger("awide_cluster.daemon").warning("%s", warning)
    from awide_cluster.daemon.service import run_daemon
    sys.exit(asyncio.run(run_daemon(config)))


def _intent(action: str):
    @click.argument("card")
    @click.option("--config", "config", required=True, type=click.Path(dir_okay=False),
                  help="a daemon config file of this cluster (for etcd and the cluster name)")
    @click.option("--wait", "wait", type=float, default=None,
                  help="seconds to wait for the leader to apply it "
                       "[default: lease TTL + 5 polls]")
    def command(card: str, config: str, wait: float | None) -> None:
        cfg = _load(config)
        if wait is None:
            wait = cfg.timing.lease_ttl + 5 * cfg.timing.poll_interval
        code = asyncio.run(_submit(cfg, action, card, wait))
        sys.exit(code)

    command.__doc__ = {
        "drain": "Take CARD out of service (state drained) until undrain. CARD is a card id, "
                 "a serial or host/name.",
        "undrain": "Put a drained CARD back (in if healthy, else out).",
        "forget": "Remove CARD from the registry; its slot is freed (moves are logged).",
    }[action]
    return cli.command(action)(command)


async def _submit(cfg, action: str, card: str, wait: float) -> int:
    from awide_cluster.contract.registry import RegistryError
    from awide_cluster.daemon.clock import SystemClock
    from awide_cluster.daemon.intents import IntentError, NotApplied, submit
    from awide_cluster.daemon.service import store_for
    from awide_cluster.store.errors import StoreError
    store = store_for(cfg)
    try:
        res = await submit(store, action, card, clock=SystemClock(), wait=wait,
                           poll=min(0.5, cfg.timing.poll_interval),
                           call_timeout=cfg.etcd.call_timeout)
    except NotApplied as e:
        click.echo(str(e), err=True)
        return 1
    except (IntentError, StoreError, RegistryError) as e:
        click.echo(f"{action} {card}: {e}", err=True)
        return 1
    finally:
        await store.close()
    for line in res.lines:
        click.echo(line)
    return 0


for _action in ("drain", "undrain", "forget"):
    _intent(_action)
