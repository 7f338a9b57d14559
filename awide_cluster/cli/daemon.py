"""``awide-cluster run | check-config | drain | undrain | forget | card clear-hold``.

``run``/``check-config``: 0 done; 2 invalid config file (``FILE: field: reason`` on stderr,
before anything touches etcd; a gateway's file is named as such); 3 (run) the etcd cluster
has fewer than 3 members and the config does not say dev_cluster.

``drain``/``undrain``/``forget`` find the cluster like status (cli/lookup.py): 0 done;
1 not done (unknown card, refused, not confirmed, not applied in time); 2 usage or config
error (no such cluster, a confirmation or --reason needed where no terminal can give it);
3 etcd unreachable.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

import click

from awide_cluster.cli.lookup import (
    EXIT_CONFIG,
    EXIT_OK,
    EXIT_UNHEALTHY,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    cluster_list,
    config_file,
    fail,
    no_such_cluster,
    resolve,
    target_options,
)
from awide_cluster.cli.main import cli
from awide_cluster.contract.bounds import INTENT_REASON_MAX

if TYPE_CHECKING:
    from awide_cluster.config.daemon import DaemonConfig
    from awide_cluster.contract.registry import CardEntry
    from awide_cluster.operator.target import ClusterTarget
    from awide_cluster.store.config import StoreConfig


def _load(path: str) -> DaemonConfig:
    from awide_cluster.config import daemon as daemon_config
    from awide_cluster.config.common import ConfigError
    try:
        return daemon_config.load(path)
    except ConfigError as e:
        for line in e.lines():          # every problem found, one line each
            click.echo(line, err=True)
        sys.exit(EXIT_CONFIG)


def _logging(level: str, fmt: str = "text", **fields: str) -> None:
    from awide_cluster.logs import setup
    setup(level, "json" if fmt == "json" else "text", fields=fields)


@cli.command("check-config")
@click.argument("file", type=click.Path(dir_okay=False), required=False)
def check_config(file: str | None) -> None:
    """Check a daemon config file; exit 78 with FILE: field: reason for every problem if it
    is bad (FILE: default $AWIDE_CONFIG, else /etc/awide-cluster/cluster.yaml)."""
    file = config_file(file, kind="daemon")
    cfg = _load(file)
    click.echo(f"{file}: ok (cluster {cfg.cluster}, host {cfg.host}, {cfg.role}, "
               f"{len(cfg.cards)} card(s){', DEVELOPMENT cluster' if cfg.dev_cluster else ''})")
    warning = cfg.etcd.plaintext_warning()
    if warning:
        click.echo(f"{file}: {warning}", err=True)


@cli.command("run")
@click.option("--config", "config", default=None, type=click.Path(dir_okay=False),
              help="the daemon config file (YAML) [default: $AWIDE_CONFIG, else "
                   "/etc/awide-cluster/cluster.yaml]")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@click.option("--log-format", default="text", show_default=True, envvar="AWIDE_LOG_FORMAT",
              type=click.Choice(["text", "json"]),
              help="text lines, or one JSON object per line (docs/operations.md, Logs); "
                   "[env: AWIDE_LOG_FORMAT]")
def run(config: str | None, log_level: str, log_format: str) -> None:
    """Run the daemon: report this host's cards, take part in leader election, and as leader
    keep the card registry. SIGTERM stops cleanly (lease revoked), SIGHUP reloads."""
    import asyncio
    config = config_file(config, kind="daemon")
    cfg = _load(config)                   # a bad file stops here, before etcd is touched
    _logging(log_level, log_format, cluster=cfg.cluster, host=cfg.host)
    warning = cfg.etcd.plaintext_warning()
    if warning:
        logging.getLogger("awide_cluster.daemon").warning("%s", warning)
    from awide_cluster.daemon.service import run_daemon
    sys.exit(asyncio.run(run_daemon(config)))


_ACTION_DOC = {
    "drain": "Take CARD out of service (state drained) until undrain. CARD is a card id, a "
             "serial or host/name. Says what will happen; status shows the drained card as a "
             "warning (exit 1) until undrain.",
    "undrain": "Put a drained CARD back (in if healthy, else out).",
    "clear-hold": "Clear the flap-damping hold of CARD: it returns at once if its host "
                  "reports it healthy (else it stays out until it is). CARD is a card id, a "
                  "serial or host/name.",
    "forget": "Remove CARD from the registry; its slot is freed and other cards may move. "
              "Says what will happen and asks (--yes where no terminal can answer); refuses a "
              "card a host still reports (it would be admitted again at once) unless --force; "
              "needs --reason.",
}


@cli.group("card")
def card_group() -> None:
    """Commands about one card (see also drain, undrain, forget)."""


def _intent(action: str, group: click.Group = cli) -> click.Command:
    @click.argument("card")
    @target_options
    @click.option("--reason", default=None, metavar="TEXT",
                  help="why (recorded in the intent with who and when, logged by the leader; "
                       f"at most {INTENT_REASON_MAX} characters)"
                       + ("; required (asked on a terminal)" if action == "forget" else ""))
    @click.option("--wait", "wait", type=float, default=None,
                  help="seconds to wait for the leader to apply it "
                       "[default: lease TTL + 5 polls of a daemon config, else 10]")
    def command(card: str, config: str | None, endpoints: str | None, cluster: str | None,
                call_timeout: float | None, reason: str | None,
                wait: float | None, yes: bool = False, force: bool = False) -> None:
        import asyncio
        reason = _check_reason(reason, required=action == "forget")
        if action == "forget" and reason is None and not sys.stdin.isatty():
            fail("forget needs --reason TEXT (who forgot which card and why is recorded in "
                 "the intent and logged by the leader); nothing was written", EXIT_USAGE)
        target, store_config = resolve(config, endpoints, cluster, call_timeout)
        wait = target.intent_wait if wait is None else wait
        code, entry = asyncio.run(_prepare(target, store_config, action, card, force))
        if code != EXIT_OK or entry is None:
            sys.exit(code)
        if action == "forget":
            if not yes and not sys.stdin.isatty():
                fail(f"forget {entry.id} needs --yes: it moves cards, and no terminal can "
                     "confirm it here (stdin is not a terminal); nothing was written",
                     EXIT_USAGE)
            if reason is None:
                reason = _check_reason(click.prompt("reason (recorded with the intent)",
                                                   err=True), required=True)
            if not yes and not click.confirm(
                    f"forget card {entry.id} ({entry.host}/{entry.name})?", default=False,
                    err=True):
                fail(f"forget {entry.id}: not confirmed, nothing was written", EXIT_UNHEALTHY)
        sys.exit(asyncio.run(_submit(target, store_config, action, entry.id, wait,
                                     reason or "")))

    command.__doc__ = _ACTION_DOC[action]
    if action == "forget":
        command = click.option("--yes", "-y", is_flag=True,
                               help="do not ask (needed where no terminal can answer)")(command)
        command = click.option("--force", is_flag=True,
                               help="forget it even though a host still reports it (it comes "
                                    "back as a new entry at the leader's next cycle)")(command)
    return group.command(action)(command)


def _check_reason(reason: str | None, *, required: bool = False) -> str | None:
    """The --reason, stripped and checked (bounded, no control character), or exit 64."""
    from awide_cluster.contract.untrusted import text_problem
    if reason is None:
        return None
    reason = reason.strip()
    why = text_problem(reason, INTENT_REASON_MAX, min_length=1 if required else 0)
    if why is not None:
        fail(f"--reason: {why}", EXIT_USAGE)
    return reason


def _store_failure(action: str, card: str, e: Exception) -> int:
    from awide_cluster.store.errors import Timeout, Unavailable
    if isinstance(e, (Unavailable, Timeout)):
        click.echo(f"awide-cluster: {action} {card}: etcd unreachable: {e}", err=True)
        return EXIT_UNREACHABLE
    click.echo(f"awide-cluster: {action} {card}: {type(e).__name__}: {e}", err=True)
    return EXIT_UNHEALTHY


async def _prepare(target: ClusterTarget, store_config: StoreConfig, action: str, card: str,
                   force: bool) -> tuple[int, CardEntry | None]:
    """Read the registry, name the card, say what will happen, and (forget) check that no
    host still reports it. (exit code, the card entry)."""
    from awide_cluster.contract.registry import RegistryError
    from awide_cluster.daemon.intents import (
        IntentError,
        NoRegistry,
        plan,
        read_registry,
        reporting,
    )
    from awide_cluster.daemon.intents import (
        resolve as resolve_card,
    )
    from awide_cluster.store.errors import StoreError
    from awide_cluster.store.etcd import EtcdStore
    store = EtcdStore(store_config)
    call = store_config.call_timeout
    try:
        try:
            reg = await read_registry(store, call)
        except NoRegistry as e:
            empty = await store.range("", prefix=True, keys_only=True, limit=1, timeout=call)
            if not empty.kvs:
                found = await cluster_list(store_config)
                click.echo(f"awide-cluster: {no_such_cluster(target, found)}", err=True)
                return EXIT_USAGE, None
            click.echo(f"awide-cluster: {action} {card}: {e}", err=True)
            return EXIT_UNHEALTHY, None
        entry = resolve_card(reg, card)
        for line in plan(action, entry, reg):
            click.echo(line)
        if action == "forget":
            seen = await reporting(store, entry.id, 2 * call)
            if seen.live and not force:
                click.echo(
                    f"awide-cluster: forget {entry.id} refused: host "
                    f"{', '.join(seen.hosts)} still reports it, so the leader would admit it "
                    "again at its next cycle (it drops from its slot for one generation, then "
                    "comes back as a new entry). Retire it first (remove it from the host's "
                    "config and reload the daemon, or unplug it), or drain it; --force to "
                    "forget it anyway. Nothing was written.", err=True)
                return EXIT_UNHEALTHY, None
            if seen.live:
                click.echo(f"  --force: host {', '.join(seen.hosts)} still reports it: the "
                           "leader admits it again at its next cycle")
            elif not seen.certain and not force:
                why = "; ".join(f"{h}: {w}" for h, w in seen.unreadable)
                click.echo(f"awide-cluster: forget {entry.id} refused: cannot tell whether a "
                           f"host still reports it (reports not read: {why}); --force to "
                           "forget it anyway. Nothing was written.", err=True)
                return EXIT_UNHEALTHY, None
        return EXIT_OK, entry
    except IntentError as e:
        click.echo(f"awide-cluster: {action} {card}: {e}", err=True)
        return EXIT_UNHEALTHY, None
    except RegistryError as e:
        click.echo(f"awide-cluster: {action} {card}: {e}", err=True)
        return EXIT_UNHEALTHY, None
    except StoreError as e:
        return _store_failure(action, card, e), None
    finally:
        await store.close()


async def _submit(target: ClusterTarget, store_config: StoreConfig, action: str, card_id: str,
                  wait: float, reason: str) -> int:
    from awide_cluster.contract.registry import RegistryError
    from awide_cluster.daemon.clock import SystemClock
    from awide_cluster.daemon.intents import IntentError, NotApplied, submit
    from awide_cluster.store.errors import StoreError
    from awide_cluster.store.etcd import EtcdStore
    store = EtcdStore(store_config)
    try:
        res = await submit(store, action, card_id, clock=SystemClock(), wait=wait,
                           poll=min(0.5, store_config.call_timeout * 2),
                           call_timeout=store_config.call_timeout, reason=reason)
    except NotApplied as e:
        click.echo(str(e), err=True)
        return EXIT_UNHEALTHY
    except (IntentError, RegistryError) as e:
        click.echo(f"awide-cluster: {action} {card_id}: {e}", err=True)
        return EXIT_UNHEALTHY
    except StoreError as e:
        return _store_failure(action, card_id, e)
    finally:
        await store.close()
    for line in res.lines:
        click.echo(line)
    return EXIT_OK


for _action in ("drain", "undrain", "forget"):
    _intent(_action)
_intent("clear-hold", card_group)
