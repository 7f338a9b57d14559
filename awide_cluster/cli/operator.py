"""``awide-cluster status`` and ``awide-cluster cards``: the cluster at one look;
``awide-cluster backup``: a snapshot of etcd now.

Exit codes (for scripts, see cli/lookup.py and docs/operations.md), the Nagios plugins': 0
OK; 1 WARNING, a state an operator set (a drained card, a pending intent, a dev cluster) or a
part down with the cluster working (a daemon, an etcd member with quorum kept), or with
``--strict`` any warning; 2 CRITICAL, a problem of severity error; 3 UNKNOWN, etcd
unreachable; 64 usage error (no such cluster included); 78 config error. Shell completion
comes from click::

    eval "$(_AWIDE_CLUSTER_COMPLETE=bash_source awide-cluster)"     # bash
    eval "$(_AWIDE_CLUSTER_COMPLETE=zsh_source awide-cluster)"      # zsh
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import click

from awide_cluster.cli.lookup import (
    EXIT_CRITICAL,
    EXIT_OK,
    EXIT_UNHEALTHY,
    EXIT_UNKNOWN,
    EXIT_USAGE,
    EXIT_WARNING,
    cluster_list,
    no_such_cluster,
    resolve,
    target_options,
)
from awide_cluster.cli.main import cli
from awide_cluster.operator.formats import FORMATS, HEIGHT, WIDTH

if TYPE_CHECKING:
    from awide_cluster.operator.model import ClusterStatus
    from awide_cluster.operator.snapshot import RawSnapshot, StatusPolicy
    from awide_cluster.operator.target import ClusterTarget
    from awide_cluster.store.config import StoreConfig

CARD_CODES = {"card_out", "card_conflict", "card_unplaced", "registry_corrupt",
              "registry_missing", "keys_unreadable", "slot_table_mismatch", "card_drained"}
Verdict: TypeAlias = "Callable[[ClusterStatus], int]"


def status_code(st: ClusterStatus) -> int:
    """status's exit code: 0 OK, 1 WARNING, 2 CRITICAL (``ClusterStatus.exit_code``)."""
    return st.exit_code


def cards_code(st: ClusterStatus) -> int:
    """cards' exit code: 2 when a card problem is an error (a card out, in conflict, without
    a slot, the registry unreadable), 1 when a card is drained, else 0."""
    found = [p for p in st.problems if p.code in CARD_CODES]
    if any(p.severity == "error" for p in found):
        return EXIT_CRITICAL
    return EXIT_WARNING if found else EXIT_OK


TAIL_LINES = 10     # history entries kept for the status screen of --watch (those that fit)


def unreachable_line(raw: RawSnapshot, call_timeout: float) -> str:
    first = next((a.error for a in raw.answers if a.error), raw.read_error)
    eps = ", ".join(raw.endpoints)
    return (f"etcd unreachable: no member of {eps} answered (call bound {call_timeout:g} s; "
            f"first error: {first})")


def _empty(raw: RawSnapshot) -> bool:
    """The key read worked and found nothing at all under the cluster's prefix."""
    return raw.kvs is not None and not raw.kvs and not raw.refused and raw.key_count is None


def _options(f: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.option("--format", "-o", "fmt", type=click.Choice(FORMATS), default="table",
                     show_default=True),
        click.option("--watch", "-w", type=click.FloatRange(0.2, 3600), is_flag=False,
                     flag_value=2.0, default=None, metavar="[SECONDS]",
                     help="refresh in place every SECONDS (2 when not given); Ctrl-C stops"),
        click.option("--count", "-n", type=click.IntRange(1, 1_000_000), default=None,
                     help="with --watch: stop after this many refreshes [default: until "
                          "Ctrl-C]"),
        click.option("--sample", type=click.FloatRange(0, 60), default=1.0, show_default=True,
                     help="one-shot: seconds between the two reads that measure report ages "
                          "(0: one read, ages unknown)"),
        click.option("--stale-after", type=click.FloatRange(0.1, 3600), default=3.0,
                     show_default=True,
                     help="a host report unchanged this long is stale; a gateway seen behind "
                          "the registry this long is behind"),
    ]
    f = target_options(f)
    for opt in reversed(opts):
        f = opt(f)
    return f


def _run(config: str | None, endpoints: str | None, cluster: str | None,
         call_timeout: float | None, fmt: str, watch: float | None, sample: float,
         stale_after: float, strict: bool, shown: str,
         judge: Verdict, tail: bool = False, count: int | None = None) -> None:
    """``shown``: "status" (everything) or "cards" (the card table); the renderer and the
    rest are imported once the target is known (a usage or config error imports none)."""
    import asyncio
    target, store_config = resolve(config, endpoints, cluster, call_timeout)
    from awide_cluster.operator.render import render, render_cards
    from awide_cluster.operator.snapshot import StatusPolicy
    what = render_cards if shown == "cards" else render
    policy = StatusPolicy(stale_after=stale_after, behind_grace=stale_after,
                          hosts=target.hosts, auth=store_config.username is not None)
    try:
        code = asyncio.run(_main(target, store_config, policy, fmt, watch, sample, strict,
                                 what, judge, tail, count))
    except KeyboardInterrupt:
        code = EXIT_UNKNOWN
    sys.exit(code)


async def _main(target: ClusterTarget, store_config: StoreConfig, policy: StatusPolicy,
                fmt: str, watch: float | None, sample: float, strict: bool,
                what: Callable[[ClusterStatus, str], str],
                judge: Verdict, tail: bool = False, count: int | None = None) -> int:
    import asyncio
    import shutil

    from awide_cluster.cli.interrupt import Interrupt
    from awide_cluster.operator.gather import StatusReader
    from awide_cluster.operator.history_query import Tail
    from awide_cluster.operator.render import fit_screen, redraw, watch_table
    from awide_cluster.store.etcd import EtcdStore
    store = EtcdStore(store_config)
    reader = StatusReader(store, cluster=target.cluster, endpoints=tuple(store_config.endpoints),
                          call_timeout=store_config.call_timeout, policy=policy)

    def verdict(st: ClusterStatus) -> int:
        code = judge(st)
        return max(code, EXIT_WARNING) if strict and st.problems else code

    try:
        if watch is None:
            raw, st = await reader.sample(sample)
            if raw.unreachable:
                line = unreachable_line(raw, store_config.call_timeout)
                if fmt == "brief":
                    click.echo(f"{target.cluster} UNKNOWN: {line}")
                else:
                    click.echo(f"awide-cluster: {line}", err=True)
                return EXIT_UNKNOWN
            if _empty(raw):
                found = await cluster_list(store_config)
                click.echo(f"awide-cluster: {no_such_cluster(target, found)}", err=True)
                return EXIT_USAGE
            click.echo(what(st, fmt))
            return verdict(st)
        tty = sys.stdout.isatty()
        code = EXIT_UNKNOWN
        interrupt = Interrupt()
        follow, recent = Tail(), deque[str](maxlen=TAIL_LINES)
        frames = 0
        try:
            while not interrupt.requested:
                got = await interrupt.race(reader.snapshot())
                if got is None:
                    break
                raw, st = got
                size = shutil.get_terminal_size((WIDTH, HEIGHT))
                if raw.unreachable:
                    lines = [f"{unreachable_line(raw, store_config.call_timeout)}   "
                             f"(retrying every {watch:g} s)"]
                    code = EXIT_UNKNOWN
                elif _empty(raw):
                    found = await cluster_list(store_config)
                    lines = [f"{no_such_cluster(target, found)}   (retrying every {watch:g} s)"]
                    code = EXIT_USAGE
                else:
                    code = verdict(st)
                    if tail and fmt == "table":
                        follow, arrived = follow.step(st.history)
                        recent.extend(e.line() for e in arrived)
                        lines = watch_table(st, recent, size.columns, size.lines)
                    else:
                        lines = what(st, fmt).split("\n")
                if tty:     # drawn over the last frame, within the screen: nothing scrolls
                    click.echo(redraw(fit_screen(lines, size.columns, size.lines)), nl=False)
                else:       # a pipe or a file: whole frames, a blank line between two
                    click.echo("\n".join(lines) + "\n")
                frames += 1
                if count is not None and frames >= count:
                    break
                await interrupt.pause(watch)
        except asyncio.CancelledError:
            pass
        finally:
            interrupt.close()
            if tty:
                click.echo("")      # the prompt under the last frame
        return code
    finally:
        await store.close()


@cli.command()
@_options
@click.option("--strict", is_flag=True,
              help="every warning counts (exit 1), also the passing ones (a gateway catching "
                   "up, a version skew during an upgrade)")
@click.option("--brief", "-b", is_flag=True,
              help="one line (for prompts and scripts): CLUSTER STATE: what is wrong")
def status(config: str | None, endpoints: str | None, cluster: str | None,
           call_timeout: float | None, fmt: str, watch: float | None, count: int | None,
           sample: float, stale_after: float, strict: bool, brief: bool) -> None:
    """The whole cluster at one look: etcd, leader, hosts, cards, gateways, problems.

    Which cluster: --config FILE, --endpoints with --cluster, $AWIDE_CONFIG,
    $AWIDE_ETCD_ENDPOINTS, else /etc/awide-cluster/cluster.yaml. Every host the config
    (a daemon's: hosts) or the registry names is expected to report, witnesses included.

    With --watch (table format), the history entries the leader records meanwhile are shown
    under the screen (the newest 10).

    Exit codes, as Nagios plugins': 0 OK; 1 WARNING: a state an operator set (a drained
    card, a pending intent, a dev cluster) or a part down with the cluster working (a daemon,
    an etcd member with quorum kept), with --strict any warning; 2 CRITICAL: a problem of
    severity error (a card out, quorum lost, ...); 3 UNKNOWN: no etcd member answers. 64 on a
    usage error (no such cluster included), 78 on a config error.
    """
    _run(config, endpoints, cluster, call_timeout, "brief" if brief else fmt, watch, sample,
         stale_after, strict, "status", status_code, tail=True, count=count)


@cli.command()
@_options
def cards(config: str | None, endpoints: str | None, cluster: str | None,
          call_timeout: float | None, fmt: str, watch: float | None, count: int | None,
          sample: float, stale_after: float) -> None:
    """The card table only: slot, id, serial, host, target, state, health, since, reason.

    Exit code 2 when a card is out, in conflict or without a slot, or the registry cannot be
    read; 1 when a card is drained; 3, 64 and 78 as for status.
    """
    _run(config, endpoints, cluster, call_timeout, fmt, watch, sample, stale_after, False,
         "cards", cards_code, count=count)


@cli.command()
@target_options
@click.option("--out", "-O", "out", required=True, type=click.Path(dir_okay=False),
              help="the snapshot file to write (atomically: a temporary file beside it, "
                   "renamed once complete and checked)")
@click.option("--endpoint", default=None,
              help="the member to take it from [default: the first configured member that "
                   "sends one]")
@click.option("--max-bytes", type=click.IntRange(1 << 20, 1 << 40), default=8 << 30,
              show_default=True, help="refuse a snapshot larger than this")
@click.option("--timeout", type=click.FloatRange(1, 86400), default=600.0, show_default=True,
              help="seconds the whole snapshot may take")
@click.option("--force", is_flag=True, help="replace FILE when it exists")
def backup(config: str | None, endpoints: str | None, cluster: str | None,
           call_timeout: float | None, out: str, endpoint: str | None, max_bytes: int,
           timeout: float, force: bool) -> None:
    """Save a snapshot of etcd (every cluster in it) to FILE, as `etcdctl snapshot save`
    does, through etcd's Maintenance API: restorable with `etcdutl snapshot restore`.

    Prints the file, its size and sha256. Exit code 0 when written; 1 when no member sent a
    complete snapshot (nothing written); 64 on a usage error, 78 on a config error.
    """
    import asyncio

    from awide_cluster.operator.backup import BackupError, take_snapshot
    from awide_cluster.store.etcd import EtcdStore

    _, store_config = resolve(config, endpoints, cluster, call_timeout)

    async def main() -> str:
        async with EtcdStore(store_config) as store:
            snap = await take_snapshot(store, Path(out), endpoint=endpoint, max_bytes=max_bytes,
                                       timeout=timeout, replace=force)
        return snap.describe()

    try:
        click.echo(f"awide-cluster: wrote {asyncio.run(main())}")
    except BackupError as e:
        click.echo(f"awide-cluster: backup failed: {e}", err=True)
        sys.exit(EXIT_UNHEALTHY)
    except KeyboardInterrupt:
        sys.exit(EXIT_UNHEALTHY)
