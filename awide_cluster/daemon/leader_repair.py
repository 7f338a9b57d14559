"""Which registry a leader cycle builds on (``base_for``, pure), and the gateways' highest
applied generation a repaired registry's generation must exceed (``gateway_generations``).

When etcd's registry is what this term wrote (or the first one it reads and nothing newer is
known) it is the base. Otherwise (corrupt, unknown, missing, gone back, or not the one this
leader wrote) the base is the last good registry this daemon knows, and the write gets a
generation above any gateway's."""

from __future__ import annotations

from dataclasses import dataclass

from awide_cluster.contract import bounds, keys, records
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract.registry import Registry
from awide_cluster.daemon.leader_read import LeaderRead
from awide_cluster.store.port import Store


@dataclass(frozen=True, slots=True)
class Base:
    registry: Registry | None       # what the decision builds on (None: rebuilt from reports)
    why: str                        # why etcd's registry is repaired ("" : it is not)
    own: Registry | None            # this term's registry (an unconfirmed write found applied)
    confirmed: bool                 # the unconfirmed write was found applied
    refused: str                    # etcd's registry refused as this (``found``), "" if not


def base_for(got: LeaderRead, *, own: Registry | None, attempted: Registry | None,
             known: Registry | None, history_reset: bool) -> Base:
    etcd_reg = got.snapshot.registry
    confirmed = etcd_reg is not None and attempted is not None and etcd_reg == attempted
    mine = etcd_reg if confirmed else own       # a write that timed out but was applied
    base, why, refused = etcd_reg, "", ""
    if got.found != "ok":
        base = mine or known
        if got.found != "missing" or base is not None:
            why = f"{keys.REGISTRY} {got.found.replace('_', ' ')}: {got.problem}"
        refused = got.found if got.found != "missing" else ""
    elif mine is not None and etcd_reg is not None and etcd_reg != mine:
        base = mine
        why = (f"{keys.REGISTRY} in etcd (generation {etcd_reg.generation}, lineage "
               f"{etcd_reg.lineage or '-'}) is not the one this leader wrote (generation "
               f"{mine.generation})")
    elif mine is None and known is not None and etcd_reg is not None:
        back = regdoc.went_back(known, etcd_reg)
        if back is None and history_reset and etcd_reg.lineage != known.lineage:
            back = (f"of lineage {etcd_reg.lineage or '-'} (generation "
                    f"{etcd_reg.generation}) after etcd's history changed, not lineage "
                    f"{known.lineage or '-'} (generation {known.generation}) held before")
        if back is not None:
            base, why = known, f"{keys.REGISTRY} {back}"
    return Base(registry=base, why=why, own=mine, confirmed=confirmed, refused=refused)


async def gateway_generations(store: Store, timeout: float) -> int:
    """The highest registry generation any gateway says it applied (0: none readable), over
    the first ``CLUSTER_MAX_KEYS`` gateway records, each within the records' bound."""
    res = await store.read_prefix(keys.GATEWAYS, max_keys=bounds.CLUSTER_MAX_KEYS,
                                  max_value_bytes=bounds.RECORD_MAX_BYTES, timeout=timeout)
    top = 0
    for kv in res.kvs:
        try:
            gid = keys.tail(kv.key, keys.GATEWAYS)
            top = max(top, records.decode_gateway(kv.value, gid).generation)
        except ValueError:
            continue                    # a refused record says nothing
    return min(top, regdoc.MAX_GENERATION - 1)
