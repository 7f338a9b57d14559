"""``awide-cluster namespace migrate NS --algorithm N``: move one namespace to another placement
algorithm (docs/versions.md, "Placement algorithm: a per-namespace migration").

The algorithm a namespace's gateways use is recorded in its ``layouts/<namespace>`` record;
each gateway lists in its ``gateways/<id>`` record the algorithms it runs. ``decide`` (pure)
allows a migration only when every live gateway lists N (and the namespace is recorded, at a
lower algorithm); ``migrate`` reads both, bounded, and writes the new record only if the
layout record is unchanged since it was read. Everything read is untrusted: a record that does
not decode refuses the migration, naming its key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from awide_cluster.contract import bounds, keys
from awide_cluster.contract.records import (
    GatewayRecord,
    GatewayRecordError,
    LayoutRecord,
    LayoutRecordError,
    decode_gateway,
    decode_layout,
)
from awide_cluster.store.port import StoreReader, StoreWriter
from awide_cluster.store.types import Compare, Put

Outcome = Literal["migrate", "already", "refused"]
NAMED_MAX = 10          # gateways named in a refusal (then "and N more")


@dataclass(frozen=True, slots=True)
class Migration:
    outcome: Outcome
    message: str
    record: LayoutRecord | None = None      # the record to write ("migrate")


def decide(namespace: str, algorithm: int, layout: LayoutRecord | LayoutRecordError | None,
           gateways: Sequence[tuple[str, GatewayRecord | GatewayRecordError]]) -> Migration:
    """Whether namespace ``namespace`` may move to placement ``algorithm``, given its layout
    record (None: absent) and every live gateway record (by key; a decode error as read)."""
    key = keys.layout(namespace)
    if layout is None:
        return Migration("refused", f"{key} is absent: no gateway has started namespace "
                                    f"{namespace} (nothing to migrate)")
    if isinstance(layout, LayoutRecordError):
        return Migration("refused", f"{layout} (not overwritten)")
    if algorithm == layout.algorithm:
        return Migration("already", f"namespace {namespace} uses placement algorithm "
                                    f"{algorithm} already: nothing written")
    if algorithm < layout.algorithm:
        return Migration("refused", f"namespace {namespace} uses placement algorithm "
                                    f"{layout.algorithm}: a migration goes to a newer one "
                                    "only")
    bad = [str(g) for _, g in gateways if isinstance(g, GatewayRecordError)]
    if bad:
        return Migration("refused", f"{bad[0]}: cannot tell which placement algorithms that "
                                    "gateway runs" + (f" (and {len(bad) - 1} more)"
                                                      if len(bad) > 1 else ""))
    if not gateways:
        return Migration("refused", "no live gateway: nothing says placement algorithm "
                                    f"{algorithm} can be run (start the gateways first)")
    lacking = [(k, g) for k, g in gateways
               if isinstance(g, GatewayRecord) and algorithm not in g.algorithms]
    if lacking:
        named = ", ".join(f"{keys.tail(k, keys.GATEWAYS)} (runs "
                          f"{', '.join(map(str, g.algorithms))})"
                          for k, g in lacking[:NAMED_MAX])
        more = f" and {len(lacking) - NAMED_MAX} more" if len(lacking) > NAMED_MAX else ""
        return Migration("refused", f"placement algorithm {algorithm} is not run by every "
                                    f"live gateway: {named}{more}; upgrade them first")
    return Migration("migrate", f"namespace {namespace}: placement algorithm "
                                f"{layout.algorithm} -> {algorithm} (every one of "
                                f"{len(gateways)} live gateways runs it); its cache starts "
                                "cold under the new algorithm",
                     replace(layout, algorithm=algorithm))


class MigrateStore(StoreReader, StoreWriter, Protocol):
    """What ``migrate`` uses of the store."""


async def migrate(store: MigrateStore, namespace: str, algorithm: int, *,
                  call_timeout: float) -> Migration:
    """Read ``layouts/<namespace>`` and every gateway record, decide, and write the migrated
    record only if the layout record is unchanged since read (else refused: run it again).
    Raises StoreError when etcd does not answer."""
    key = keys.layout(namespace)
    kv = await store.get(key, max_value_bytes=bounds.RECORD_MAX_BYTES, timeout=call_timeout)
    layout: LayoutRecord | LayoutRecordError | None = None
    if kv is not None:
        try:
            layout = decode_layout(kv.value, key=key)
        except LayoutRecordError as e:
            layout = e
    read = await store.read_prefix(keys.GATEWAYS, max_keys=bounds.CLUSTER_MAX_KEYS,
                                   max_value_bytes=bounds.RECORD_MAX_BYTES,
                                   timeout=call_timeout)
    read.complete()
    gateways: list[tuple[str, GatewayRecord | GatewayRecordError]] = []
    for g in read.kvs:
        try:
            gateways.append((g.key, decode_gateway(g.value, key=g.key)))
        except GatewayRecordError as e:
            gateways.append((g.key, e))
    for k, why in read.refused.items():
        gateways.append((k, GatewayRecordError(f"value over the bound: {why}", key=k)))
    decided = decide(namespace, algorithm, layout, gateways)
    if decided.outcome != "migrate" or decided.record is None or kv is None:
        return decided
    put = await store.txn([Compare(key, "mod", "equal", kv.mod_revision)],
                          [Put(key, decided.record.encode())], timeout=call_timeout)
    if not put.succeeded:
        return Migration("refused", f"{key} changed while being migrated: nothing written "
                                    "(run it again)")
    return decided
