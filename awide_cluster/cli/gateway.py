"""``awide-cluster gateway``: check a gateway config, or run the gateway library standalone.

- ``gateway check-config FILE``: exit 0 and a one-line summary, or exit 78 and
  ``FILE: field: reason`` on stderr.
- ``gateway watch --config FILE``: starts a ``ClusterGateway``, prints the slot table, then
  every change event, one line each (stdout flushed per line), and the table again after each
  change of the slots; stops cleanly on SIGTERM/SIGINT (exit 0). With ``--json`` each line is
  one JSON object carrying ``t`` = ``time.monotonic()`` (system-wide on Linux, so times compare
  across processes): ``{"type": "event", "kind", "card", "slot", "old_slot", "generation",
  "in_service", "detail"}`` and ``{"type": "table", "generation", "fingerprint", "layout_ok",
  "slots": [null | {"slot", "card", "in", "why", "serial", "host", "name", "state"}],
  "unplaced"}`` (a table after each event and whenever the view changed, checked every 0.1 s),
  plus ``started`` / ``stopped``; every object has ``gateway``. Exit 3 when the gateway
  refuses to start (layout mismatch, wipe asked for), 2 on a bad config. With
  ``--metrics HOST:PORT`` it also serves the gateway's Prometheus metrics on ``GET /metrics``
  (docs/metrics.md). SIGHUP re-reads the etcd CA, certificate, key and password files
  (``ClusterGateway.reload_credentials``) and says so in one line on stderr.
"""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

import click

from awide_cluster.cli.lookup import EXIT_CONFIG
from awide_cluster.cli.main import cli

if TYPE_CHECKING:
    from awide_gateway_cluster.config import GatewayConfig
    from awide_gateway_cluster.gateway import ClusterGateway
    from awide_gateway_cluster.subscribe import Subscription
    from awide_gateway_cluster.view import SlotView


@cli.group("gateway")
def gateway() -> None:
    """The gateway library in cluster mode (check a config, watch the slots)."""


def _load(path: str) -> GatewayConfig:
    from awide_gateway_cluster.config import ConfigError, load_config
    try:
        return load_config(path)
    except ConfigError as e:
        for line in e.lines():      # FILE: field: reason, each (or: not a gateway config)
            click.echo(line, err=True)
        sys.exit(EXIT_CONFIG)


@gateway.command("check-config")
@click.argument("file", type=click.Path(dir_okay=False), required=False)
def check_config(file: str | None) -> None:
    """Validate a gateway config FILE (default $AWIDE_CONFIG; exit 78 and every field at
    fault if it is bad, or one line if it is a daemon's)."""
    from awide_cluster.cli.lookup import config_file
    from awide_gateway_cluster.layout import namespace
    file = config_file(file, kind="gateway")
    cfg = _load(file)
    click.echo(f"{file}: ok: gateway {cfg.id} of cluster {cfg.cluster}, namespace "
               f"{namespace(cfg.model)}, placement {cfg.key_placement}, "
               f"{len(cfg.etcd.endpoints)} etcd endpoint(s)")
    warning = cfg.etcd.plaintext_warning()
    if warning:
        click.echo(f"{file}: {warning}", err=True)


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _json_line(line_type: str, gateway_id: str, **fields: object) -> None:
    import json
    import time
    _out(json.dumps({"type": line_type, "t": time.monotonic(), "gateway": gateway_id, **fields}))


def _json_table(gateway_id: str, v: SlotView) -> None:
    slots = [None if s.card_id is None else {
        "slot": s.slot, "card": s.card_id, "in": s.in_service, "why": s.why,
        "serial": s.serial, "host": s.host, "name": s.name, "state": s.registry_state}
        for s in v.slots]
    _json_line("table", gateway_id, generation=v.generation, fingerprint=v.fingerprint,
               layout_ok=v.layout_ok, slots=slots, unplaced=[list(u) for u in v.unplaced])


async def _json_printer(gw: ClusterGateway, sub: Subscription) -> None:
    import asyncio
    shown: SlotView | None = None

    def table_if_changed() -> None:
        nonlocal shown
        now = gw.snapshot()
        if shown is None or now.slots != shown.slots or now.generation != shown.generation:
            shown = now
            _json_table(gw.id, now)

    async def ticker() -> None:
        while True:
            table_if_changed()
            await asyncio.sleep(0.1)

    tick = asyncio.create_task(ticker())
    try:
        async for e in sub:
            _json_line("event", gw.id, kind=e.kind, card=e.card_id, slot=e.slot,
                       old_slot=e.old_slot, generation=e.generation, in_service=e.in_service,
                       detail=e.detail)
            table_if_changed()
    finally:
        tick.cancel()


def _reload_credentials(gw: ClusterGateway) -> None:
    """SIGHUP: read the etcd credential files again; a bad one is refused in one line naming
    it on stderr, and the credentials in use stay."""
    from awide_cluster.store.credentials import CredentialError
    try:
        what = gw.reload_credentials()
    except CredentialError as e:
        click.echo(f"gateway {gw.id}: credentials reload refused, keeping the ones in use: {e}",
                   err=True)
        return
    click.echo(f"gateway {gw.id}: {what}", err=True)


async def _watch(cfg: GatewayConfig, duration: float | None, as_json: bool = False,
                 metrics: str | None = None) -> int:
    import asyncio

    from awide_gateway_cluster import ClusterGateway, LayoutMismatch, WipeRefused
    from awide_gateway_cluster.metrics import MetricsServer

    gw = ClusterGateway(cfg)
    server = None
    if metrics is not None:
        try:
            server = MetricsServer(gw, metrics)
            await server.start()
        except ValueError as e:
            click.echo(f"gateway {cfg.id}: --metrics: {e}", err=True)
            return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, _reload_credentials, gw)
    sub = gw.subscribe()
    try:
        await gw.start()
    except (LayoutMismatch, WipeRefused) as e:
        click.echo(f"gateway {cfg.id} refused to start: {e}", err=True)
        if server is not None:
            await server.stop()
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

    if as_json:
        _json_line("started", gw.id)
    else:
        _out(f"gateway {gw.id} started")
    task = asyncio.create_task(_json_printer(gw, sub) if as_json else printer())
    try:
        try:
            async with asyncio.timeout(duration):
                await stop.wait()
        except TimeoutError:
            pass
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if server is not None:
            await server.stop()
        await gw.stop()
        if as_json:
            _json_line("stopped", gw.id)
        else:
            _out(f"gateway {gw.id} stopped")
    return 0


@gateway.command("watch")
@click.option("--config", "config_file", default=None, type=click.Path(dir_okay=False),
              help="the gateway config file (mode: cluster) [default: $AWIDE_CONFIG]")
@click.option("--duration", type=float, default=None,
              help="stop after this many seconds (default: until SIGTERM/SIGINT)")
@click.option("-v", "--verbose", is_flag=True, help="log the library's INFO lines to stderr")
@click.option("--json", "as_json", is_flag=True,
              help="one JSON object per line (events and slot tables, with time.monotonic())")
@click.option("--metrics", "metrics", default=None, metavar="HOST:PORT",
              help="also serve the gateway's Prometheus metrics on GET /metrics there")
@click.option("--log-format", default="text", show_default=True, envvar="AWIDE_LOG_FORMAT",
              type=click.Choice(["text", "json"]),
              help="log lines on stderr as text or one JSON object each [env: AWIDE_LOG_FORMAT]")
def watch(config_file: str | None, duration: float | None, verbose: bool,
          as_json: bool, metrics: str | None, log_format: str) -> None:
    """Run the gateway library standalone: print the slot table and every change."""
    import asyncio

    from awide_cluster.cli.lookup import config_file as lookup_config
    cfg = _load(lookup_config(config_file, kind="gateway"))
    from awide_cluster.logs import setup
    setup("info" if verbose else "warning", "json" if log_format == "json" else "text",
          fields={"cluster": cfg.cluster, "gateway": cfg.id})
    sys.exit(asyncio.run(_watch(cfg, duration, as_json, metrics)))
