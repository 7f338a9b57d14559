"""``awide-cluster gateway``: check a gateway config, or run the gateway library standalone.

- ``gateway check-config FILE``: exit 0 and a one-line summary, or exit 2 and
  ``FILE: field: reason`` on stderr.
- ``gateway watch --config FILE``: starts a ``ClusterGateway``, prints the slot table, then
  every change event, one line each (stdout flushed per line), and the table again after each
  change of the slots; stops cleanly on SIGTERM/SIGINT (exit 0). Exit 3 when the gateway
  refuses to start (layout mismatch, wipe asked for), 2 on a bad config.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

import click

from awide_cluster.cli.main import cli


@cli.group("gateway")
def gateway() -> None:
    """The gateway library in cluster mode (check a config, watch the slots)."""


def _load(path: str):  # type: ignore[no-untyped-def]
    from awide_gateway_cluster.config import ConfigError, load_config
    try:
        return load_config(path)
    except ConfigError as e:
        click.echo(f"{e.file}: {e.field}: {e.reason}", err=True)
        sys.exit(2)


@gateway.command("check-config")
@click.argument("file", type=click.Path(dir_okay=False))
def check_config(file: str) -> None:
    """Validate a gateway config FILE (exit 2 and the field at fault if it is bad)."""
    from awide_gateway_cluster.layout import namespace
    cfg = _load(file)
    click.echo(f"{file}: ok: gateway {cfg.id} of cluster {cfg.cluster}, namespace "
               f"{namespace(cfg.model)}, placement {cfg.key_placement}, "
               f"{len(cfg.etcd.endpoints)} etcd endpoint(s)")


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def _watch(cfg, duration: float | None) -> int:  # type: ignore[no-untyped-def]
    from awide_gateway_cluster import ClusterGateway, LayoutMismatch, WipeRefused

    gw = ClusterGateway(cfg)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    sub = gw.subscribe()
    try:
        await gw.start()
    except (LayoutMismatch, WipeRefused) as e:
        click.echo(f"gateway {cfg.id} refused to start: {e}", err=True)
        return 3

    async def printer() -> None:
        shown = gw.snapshot()
        for line in shown.table_lines():
            _out(line)
        async for e in sub:
            _out(f"event {e.line()}")
            now = gw.snapshot()
            if now.slots != shown.slots or now.generation != shown.generation:
                shown = now
                for line in now.table_lines():
                    _out(line)

    _out(f"gateway {gw.id} started")
    task = asyncio.create_task(printer())
    try:
        try:
            async with asyncio.timeout(duration):
                await stop.wait()
        except TimeoutError:
            pass
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await gw.stop()
        _out(f"gateway {gw.id} stopped")
    return 0


@gateway.command("watch")
@click.option("--config", "config_file", required=True, type=click.Path(dir_okay=False),
              help="the gateway config file (mode: cluster)")
@click.option("--duration", type=float, default=None,
              help="stop after this many seconds (default: until SIGTERM/SIGINT)")
@click.option("-v", "--verbose", is_flag=True, help="log the library's INFO lines to stderr")
def watch(config_file: str, duration: float | None, verbose: bool) -> None:
    """Run the gateway library standalone: print the slot table and every change."""
    cfg = _load(config_file)
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.exit(asyncio.run(_watch(cfg, duration)))
