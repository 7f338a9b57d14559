"""``awide-cluster history``: what happened to the registry, from the leader's history ring.

Exit codes (cli/lookup.py): 0 shown (also when nothing matches, or no history was written
yet); 1 the history cannot be read (corrupt, over its bound: named, with the key); 2 usage or
config error (a bad --since, no such cluster); 3 etcd unreachable.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime

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
from awide_cluster.contract import bounds, keys
from awide_cluster.contract import history_ring as histdoc
from awide_cluster.operator.history_query import BadSince, parse_since, select
from awide_cluster.operator.target import ClusterTarget
from awide_cluster.store.config import StoreConfig


@cli.command()
@target_options
@click.option("--card", default=None, metavar="ID|NAME",
              help="only this card's entries: its card id, its name, or host/name")
@click.option("--since", default=None, metavar="DURATION|ISO-TIME",
              help="only entries from this time on: 90s, 10m, 2h, 1d, 1w back from now, or an "
                   "ISO time (the entries carry the leader's clock, information only)")
@click.option("--json", "as_json", is_flag=True, help="the entries as JSON")
def history(config: str | None, endpoints: str | None, cluster: str | None,
            call_timeout: float | None, card: str | None, since: str | None,
            as_json: bool) -> None:
    """What happened to the cards and the registry, oldest first, one line per entry:
    generation, the leader's time, what (joined, in, out, moved, forgotten, dropped, drained,
    undrained, conflict, leader, intent, repaired), the card, the reason, and who/why for an
    operator's action. The leader keeps the newest 500 entries.

    Exit code 0 when shown; 1 when the history cannot be read; 2 on a usage or config error
    (no such cluster included); 3 when no etcd member answers.
    """
    try:
        after = parse_since(since, datetime.now(UTC)) if since is not None else None
    except BadSince as e:
        fail(str(e), EXIT_USAGE)
    target, store_config = resolve(config, endpoints, cluster, call_timeout)
    try:
        code = asyncio.run(_show(target, store_config, card, after, as_json))
    except KeyboardInterrupt:
        code = EXIT_UNHEALTHY
    sys.exit(code)


async def _show(target: ClusterTarget, store_config: StoreConfig, card: str | None,
                after: datetime | None, as_json: bool) -> int:
    from awide_cluster.store.errors import StoreError, Timeout, Unavailable, ValueTooLarge
    from awide_cluster.store.etcd import EtcdStore
    store = EtcdStore(store_config)
    call = store_config.call_timeout
    try:
        try:
            kv = await store.get(keys.HISTORY, timeout=call,
                                 max_value_bytes=bounds.HISTORY_MAX_BYTES)
            if kv is None:
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
                ring = histdoc.decode(kv.value)
        except ValueTooLarge as e:
            raise histdoc.HistoryError(f"value over {e.limit} bytes, refused unread",
                                       key=keys.HISTORY) from None
    except histdoc.HistoryError as e:
        click.echo(f"awide-cluster: {e}: the history cannot be shown (status says "
                   f"{e.problem}; the leader starts a fresh one at its next registry write)",
                   err=True)
        return EXIT_UNHEALTHY
    except (Unavailable, Timeout) as e:
        click.echo(f"awide-cluster: etcd unreachable: {e}", err=True)
        return EXIT_UNREACHABLE
    except StoreError as e:
        click.echo(f"awide-cluster: history: {type(e).__name__}: {e}", err=True)
        return EXIT_UNHEALTHY
    finally:
        await store.close()
    shown = select(ring, card=card, since=after)
    if as_json:
        click.echo(json.dumps({"cluster": target.cluster, "ring": ring.ring,
                               "entries": [x.to_dict() for x in shown]}, indent=2))
    else:
        for entry in shown:
            click.echo(entry.line())
    return EXIT_OK
