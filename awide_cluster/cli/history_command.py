"""``awide-cluster history``: what happened to the registry, from the leader's history ring.

``--follow``: after the entries shown, each new entry as the leader records it (the ring read
every ``--interval``, each read bounded by the call timeout; a read that fails is said once on
stderr and retried), until Ctrl-C or SIGTERM, which end it with exit code 0.

Exit codes (cli/lookup.py): 0 shown (also when nothing matches, or no history was written
yet); 1 the history cannot be read (corrupt, over its bound: named, with the key); 3 etcd
unreachable; 64 usage error (a bad --since, no such cluster), 78 config error.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from awide_cluster.cli.lookup import (
    EXIT_OK,
    EXIT_UNHEALTHY,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    cluster_list,
    fail,
    no_such_cluster,
    resolve,
    target_options,
)
from awide_cluster.cli.main import cli

if TYPE_CHECKING:
    from awide_cluster.cli.interrupt import Interrupt
    from awide_cluster.contract import history_ring as histdoc
    from awide_cluster.operator.target import ClusterTarget
    from awide_cluster.store.config import StoreConfig
    from awide_cluster.store.etcd import EtcdStore


@cli.command()
@target_options
@click.option("--card", default=None, metavar="ID|NAME",
              help="only this card's entries: its card id, its name, or host/name")
@click.option("--since", default=None, metavar="DURATION|ISO-TIME",
              help="only entries from this time on: 90s, 10m, 2h, 1d, 1w back from now, or an "
                   "ISO time (the entries carry the leader's clock, information only)")
@click.option("--json", "as_json", is_flag=True,
              help="the entries as JSON (with --follow: one JSON object per entry and line)")
@click.option("--follow", "-f", is_flag=True,
              help="then print each new entry as the leader records it, until Ctrl-C")
@click.option("--interval", type=click.FloatRange(0.2, 60), default=1.0, show_default=True,
              help="with --follow: seconds between two reads of the history")
def history(config: str | None, endpoints: str | None, cluster: str | None,
            call_timeout: float | None, card: str | None, since: str | None,
            as_json: bool, follow: bool, interval: float) -> None:
    """What happened to the cards and the registry, oldest first, one line per entry:
    generation, the leader's time, what (joined, in, out, moved, forgotten, dropped, drained,
    undrained, conflict, leader, intent, repaired), the card, the reason, and who/why for an
    operator's action. The leader keeps the newest 500 entries.

    With --follow, then each new entry as the leader records it (read every --interval),
    until Ctrl-C, which ends it with exit code 0.

    Exit code 0 when shown; 1 when the history cannot be read; 3 when no etcd member answers;
    64 on a usage error (no such cluster included), 78 on a config error.
    """
    import asyncio

    from awide_cluster.operator.history_query import BadSince, parse_since
    try:
        after = parse_since(since, datetime.now(UTC)) if since is not None else None
    except BadSince as e:
        fail(str(e), EXIT_USAGE)
    target, store_config = resolve(config, endpoints, cluster, call_timeout)
    try:
        code = asyncio.run(_show(target, store_config, card, after, as_json,
                                 interval if follow else None))
    except KeyboardInterrupt:   # before the signal handlers (--follow: the way it ends)
        code = EXIT_OK if follow else EXIT_UNHEALTHY
    sys.exit(code)


async def _read(store: EtcdStore, call: float) -> histdoc.History | None:
    """The history ring (None: no history key), each read bounded; raises HistoryError when
    it cannot be used, StoreError when etcd fails."""
    from awide_cluster.contract import bounds, keys
    from awide_cluster.contract import history_ring as histdoc
    from awide_cluster.store.errors import ValueTooLarge
    try:
        kv = await store.get(keys.HISTORY, timeout=call, max_value_bytes=bounds.HISTORY_MAX_BYTES)
    except ValueTooLarge as e:
        raise histdoc.HistoryError(f"value over {e.limit} bytes, refused unread",
                                   key=keys.HISTORY) from None
    return None if kv is None else histdoc.decode(kv.value)


def _print(entries: Sequence[histdoc.Entry], as_lines_of_json: bool) -> None:
    import json
    for entry in entries:
        click.echo(json.dumps(entry.to_dict()) if as_lines_of_json else entry.line())


async def _show(target: ClusterTarget, store_config: StoreConfig, card: str | None,
                after: datetime | None, as_json: bool, follow: float | None = None) -> int:
    import json

    from awide_cluster.contract import history_ring as histdoc
    from awide_cluster.operator.history_query import select
    from awide_cluster.store.errors import StoreError, Timeout, Unavailable
    from awide_cluster.store.etcd import EtcdStore
    store = EtcdStore(store_config)
    call = store_config.call_timeout
    try:
        try:
            got = await _read(store, call)
            if got is None:
                empty = await store.range("", prefix=True, keys_only=True, limit=1,
                                          timeout=call)
                if not empty.kvs:
                    found = await cluster_list(store_config)
                    click.echo(f"awide-cluster: {no_such_cluster(target, found)}", err=True)
                    return EXIT_USAGE
                ring = histdoc.EMPTY
                click.echo(f"awide-cluster: no history in cluster {target.cluster} yet (the "
                           "leader writes it with its next registry write)", err=True)
            else:
                ring = got
        except histdoc.HistoryError as e:
            click.echo(f"awide-cluster: {e}: the history cannot be shown (status says "
                       f"{e.problem}; the leader starts a fresh one at its next registry "
                       "write)", err=True)
            return EXIT_UNHEALTHY
        except (Unavailable, Timeout) as e:
            click.echo(f"awide-cluster: etcd unreachable: {e}", err=True)
            return EXIT_UNREACHABLE
        except StoreError as e:
            click.echo(f"awide-cluster: history: {type(e).__name__}: {e}", err=True)
            return EXIT_UNHEALTHY
        shown = select(ring, card=card, since=after)
        if follow is not None:
            from awide_cluster.cli.interrupt import Interrupt
            interrupt = Interrupt()     # before the first line: a Ctrl-C after it ends with 0
            _print(shown, as_json)
            await _follow(store, call, ring, card, after, as_json, follow, interrupt)
        elif as_json:
            click.echo(json.dumps({"cluster": target.cluster, "ring": ring.ring,
                                   "entries": [x.to_dict() for x in shown]}, indent=2))
        else:
            _print(shown, False)
        return EXIT_OK
    finally:
        await store.close()


async def _follow(store: EtcdStore, call: float, ring: histdoc.History, card: str | None,
                  after: datetime | None, as_json: bool, interval: float,
                  interrupt: Interrupt) -> None:
    """Every ``interval`` read the ring and print the entries that arrived since the last
    read (``Tail``: a fresh ring prints all of it), until SIGINT/SIGTERM. A failed read is
    said once on stderr (again only when the failure changes) and retried."""
    from awide_cluster.contract import history_ring as histdoc
    from awide_cluster.operator.history_query import Tail, select
    from awide_cluster.store.errors import StoreError
    tail, _ = Tail().step(ring)
    said = ""
    try:
        while not await interrupt.pause(interval):
            try:
                got = await interrupt.race(_read(store, call))
            except (histdoc.HistoryError, StoreError) as e:
                trouble = f"awide-cluster: history: {e} (retrying every {interval:g} s)"
                if trouble != said:
                    click.echo(trouble, err=True)
                said = trouble
                continue
            if interrupt.requested:
                break
            if said:
                click.echo("awide-cluster: history read again", err=True)
                said = ""
            tail, arrived = tail.step(got if got is not None else histdoc.EMPTY)
            _print(select(histdoc.History(ring="", entries=arrived), card=card, since=after),
                   as_json)
            sys.stdout.flush()
    finally:
        interrupt.close()
