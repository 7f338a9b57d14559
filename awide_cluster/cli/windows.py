"""``awide-cluster pause | resume``, ``host maintenance HOST``, ``silence | unsilence CARD``:
operator windows (docs/operations.md, "Windows: pause, maintenance, silence").

Each writes a request under ``window-requests/`` and waits, bounded, until the leader applied
it, then says what is in force. Exit codes as drain: 0 done; 1 not done (unknown host or card,
not applied in time); 3 etcd unreachable; 64 usage error (a bad duration or reason, no such
cluster).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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
from awide_cluster.contract.bounds import INTENT_REASON_MAX

if TYPE_CHECKING:
    from awide_cluster.contract.windows import Scope, WindowRequest
    from awide_cluster.operator.target import ClusterTarget
    from awide_cluster.store.config import StoreConfig

_WAIT_HELP = ("seconds to wait for the leader to apply it "
              "[default: lease TTL + 5 polls of a daemon config, else 10]")


def _reason(reason: str | None, *, required: bool) -> str:
    from awide_cluster.contract.untrusted import text_problem
    text = (reason or "").strip()
    why = text_problem(text, INTENT_REASON_MAX, min_length=1 if required else 0)
    if why is not None:
        fail(f"--reason: {why}" + (" (who, when and why are shown in status and history)"
                                   if required else ""), EXIT_USAGE)
    return text


def _seconds(text: str) -> int:
    from awide_cluster.daemon.window_requests import parse_duration
    try:
        return parse_duration(text)
    except ValueError as e:
        fail(f"--for: {e}", EXIT_USAGE)


def _run(config: str | None, endpoints: str | None, cluster: str | None,
         call_timeout: float | None, wait: float | None, scope: Scope, name: str,
         request: WindowRequest, drain: bool = False) -> None:
    import asyncio
    target, store_config = resolve(config, endpoints, cluster, call_timeout)
    wait = target.intent_wait if wait is None else wait
    sys.exit(asyncio.run(_submit(target, store_config, scope, name, request, wait, drain)))


async def _submit(target: ClusterTarget, store_config: StoreConfig, scope: Scope, name: str,
                  request: WindowRequest, wait: float, drain: bool) -> int:
    from awide_cluster.contract.registry import RegistryError
    from awide_cluster.contract.windows import WindowsError, subject
    from awide_cluster.daemon import intents
    from awide_cluster.daemon.clock import SystemClock
    from awide_cluster.daemon.window_requests import submit
    from awide_cluster.store.errors import StoreError, Timeout, Unavailable
    from awide_cluster.store.etcd import EtcdStore
    store = EtcdStore(store_config)
    call = store_config.call_timeout
    what = subject(scope, name)
    try:
        if scope != "pause":
            reg = await intents.read_registry(store, call)
            if scope == "card":
                name = intents.resolve(reg, name).id
                what = subject(scope, name)
            elif request.action == "start" and name not in reg.hosts \
                    and name not in {c.host for c in reg.cards} and name not in target.hosts:
                click.echo(f"awide-cluster: {what}: not a host of cluster {target.cluster} "
                           f"(hosts: {', '.join(reg.hosts) or 'none known'}); nothing was "
                           "written", err=True)
                return EXIT_UNHEALTHY
            if drain:
                for card in [c for c in reg.cards if c.host == name and c.state != "drained"]:
                    res = await intents.submit(
                        store, "drain", card.id, clock=SystemClock(), wait=wait,
                        poll=min(0.5, call * 2), call_timeout=call, by=request.by,
                        reason=f"maintenance of {name}: {request.reason}")
                    for line in res.lines:
                        click.echo(line)
        taken = await submit(store, scope, name, request, clock=SystemClock(), wait=wait,
                             poll=min(0.5, call * 2), call_timeout=call)
    except (intents.IntentError, RegistryError, WindowsError) as e:
        click.echo(f"awide-cluster: {what} {request.action}: {e}", err=True)
        return EXIT_UNHEALTHY
    except (Unavailable, Timeout) as e:
        click.echo(f"awide-cluster: {what}: etcd unreachable: {e}", err=True)
        return EXIT_UNREACHABLE
    except StoreError as e:
        click.echo(f"awide-cluster: {what}: {type(e).__name__}: {e}", err=True)
        return EXIT_UNHEALTHY
    finally:
        await store.close()
    if request.action == "end":
        if taken.window is not None:
            click.echo(f"{what}: still in force ({taken.window.describe()}): a newer request "
                       "replaced the end", err=True)
            return EXIT_UNHEALTHY
        click.echo(f"{what}: ended (`awide-cluster history` has it)")
        return EXIT_OK
    if taken.window is None:
        click.echo(f"awide-cluster: {what}: the leader did not set it (see `awide-cluster "
                   "history`)", err=True)
        return EXIT_UNHEALTHY
    click.echo(f"{what}: in force {taken.window.describe()}")
    return EXIT_OK


def _start(seconds: int, reason: str, drained: bool = False) -> WindowRequest:
    from awide_cluster.contract.records import iso
    from awide_cluster.contract.windows import WindowRequest
    from awide_cluster.daemon.window_requests import who
    return WindowRequest("start", seconds=seconds, by=who(), at=iso(time.time()),
                         reason=reason, drained=drained)


def _window_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--for, --reason (both required) and --wait: a window's options (pause, silence)."""
    f = click.option("--wait", "wait", type=float, default=None, help=_WAIT_HELP)(f)
    f = click.option("--reason", required=True, metavar="TEXT",
                     help=f"why (shown in status and history; at most {INTENT_REASON_MAX} "
                          "characters)")(f)
    return click.option("--for", "duration", required=True, metavar="DURATION",
                        help="how long: 90s, 20m, 2h, 1d (at most 7 days); it expires by "
                             "itself")(f)


def _end(reason: str) -> WindowRequest:
    from awide_cluster.contract.records import iso
    from awide_cluster.contract.windows import WindowRequest
    from awide_cluster.daemon.window_requests import who
    return WindowRequest("end", by=who(), at=iso(time.time()), reason=reason)


@cli.command("pause")
@target_options
@_window_options
def pause(config: str | None, endpoints: str | None, cluster: str | None,
          call_timeout: float | None, duration: str, reason: str, wait: float | None) -> None:
    """Pause the cluster: the leader takes no card out (a card failing meanwhile stays in;
    cards still come back, drains and admissions still apply) until `awide-cluster resume` or
    the end of --for. status shows it as a warning (exit 1) with who, why and until when."""
    _run(config, endpoints, cluster, call_timeout, wait, "pause", "",
         _start(_seconds(duration), _reason(reason, required=True)))


@cli.command("resume")
@target_options
@click.option("--reason", default=None, metavar="TEXT", help="why (recorded in history)")
@click.option("--wait", "wait", type=float, default=None, help=_WAIT_HELP)
def resume(config: str | None, endpoints: str | None, cluster: str | None,
           call_timeout: float | None, reason: str | None, wait: float | None) -> None:
    """End a pause early: the leader takes failing cards out again (after sick_polls bad
    polls counted from now)."""
    _run(config, endpoints, cluster, call_timeout, wait, "pause", "",
         _end(_reason(reason, required=False)))


@cli.group("host")
def host() -> None:
    """Host-wide operator actions."""


@host.command("maintenance")
@click.argument("host_name", metavar="HOST")
@target_options
@click.option("--for", "duration", default=None, metavar="DURATION",
              help="how long: 90s, 20m, 2h, 1d (at most 7 days); it expires by itself")
@click.option("--reason", default=None, metavar="TEXT",
              help=f"why (shown in status and history; at most {INTENT_REASON_MAX} characters; "
                   "required with --for)")
@click.option("--drain", is_flag=True,
              help="drain the host's cards first (they stay drained until undrain, also after "
                   "the window)")
@click.option("--end", "end", is_flag=True, help="end the window now")
@click.option("--wait", "wait", type=float, default=None, help=_WAIT_HELP)
def maintenance(host_name: str, config: str | None, endpoints: str | None, cluster: str | None,
                call_timeout: float | None, duration: str | None, reason: str | None,
                drain: bool, end: bool, wait: float | None) -> None:
    """Declare a maintenance window for HOST: while it lasts, its daemon may be stopped and
    its report gone or frozen without its cards going out (they stay in service while their
    targets answer: a fresh report of the host saying a card is sick still takes it out);
    with --drain its cards are drained first. status shows it as a warning (exit 1) with who,
    why and until when; after it, detection is as usual. --end ends it early."""
    if end == (duration is not None):
        fail("give --for DURATION (with --reason) to start a window, or --end to end it",
             EXIT_USAGE)
    if end:
        if drain:
            fail("--drain starts a window; undrain the cards with `awide-cluster undrain`",
                 EXIT_USAGE)
        request = _end(_reason(reason, required=False))
    else:
        request = _start(_seconds(duration or ""), _reason(reason, required=True), drain)
    _run(config, endpoints, cluster, call_timeout, wait, "host", host_name, request, drain)


@cli.command("silence")
@click.argument("card")
@target_options
@_window_options
def silence(card: str, config: str | None, endpoints: str | None, cluster: str | None,
            call_timeout: float | None, duration: str, reason: str, wait: float | None) -> None:
    """Mute a known problem of CARD (a card id, serial or host/name): status shows it muted
    and its exit code ignores the card's problems (a warning, exit 1, while the silence
    lasts); its alerts carry the label silenced="true". The leader's decisions do not
    change."""
    _run(config, endpoints, cluster, call_timeout, wait, "card", card,
         _start(_seconds(duration), _reason(reason, required=True)))


@cli.command("unsilence")
@click.argument("card")
@target_options
@click.option("--reason", default=None, metavar="TEXT", help="why (recorded in history)")
@click.option("--wait", "wait", type=float, default=None, help=_WAIT_HELP)
def unsilence(card: str, config: str | None, endpoints: str | None, cluster: str | None,
              call_timeout: float | None, reason: str | None, wait: float | None) -> None:
    """End a silence of CARD early."""
    _run(config, endpoints, cluster, call_timeout, wait, "card", card,
         _end(_reason(reason, required=False)))
