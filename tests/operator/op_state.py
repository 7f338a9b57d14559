"""Known cluster states, written straight into a real etcd with the contract encoders."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from typing import Literal

from awide_cluster.contract import keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract import report as reportdoc
from awide_cluster.contract.records import iso
from awide_cluster.contract.registry import (
    CardEntry,
    Health,
    Registry,
    State,
    card_id,
    with_slots,
)
from awide_cluster.contract.report import HostReport, ReportedCard
from awide_cluster.contract.target import NvmeTarget
from awide_cluster.store.config import StoreConfig
from awide_cluster.store.etcd import EtcdStore

NQN = "nqn.2024-01.io.awide:{host}-{name}"


def target(host_ip: str, host: str, name: str) -> NvmeTarget:
    return NvmeTarget("tcp", host_ip, 4420, NQN.format(host=host, name=name))


def card(host: str, name: str, serial: str, *, ip: str = "10.0.0.1", state: State = "in",
         health: Health = "ok", reason: str = "", admitted: int = 1, changed: int = 1,
         conflict: str | None = None) -> CardEntry:
    model, identity = "AWIDE-ACC-1", f"id-{serial}"
    return CardEntry(
        id=card_id(serial, model, identity), serial=serial, model=model, identity=identity,
        host=host, name=name, kind="nvme", state=state, health=health, reason=reason,
        admitted=admitted, changed_generation=changed, changed_at=iso(time.time() - 30),
        target=target(ip, host, name), conflict=conflict)


def reported(c: CardEntry, *, healthy: bool = True, reason: str = "") -> ReportedCard:
    return ReportedCard(
        name=c.name, kind=c.kind, found=True, serial=c.serial, model=c.model,
        identity=c.identity, device="nvme0n1", controller_state="live", healthy=healthy,
        reason=reason, target=c.target)


def registry(cards: list[CardEntry], generation: int = 5, *, written_ago: float = 60.0,
             leader: str = "h1", cluster: str = "c1") -> Registry:
    reg = Registry(cluster=cluster, generation=generation, leader=leader, cards=tuple(cards),
                   written_at=iso(time.time() - written_ago))
    return with_slots(reg)


def report(host: str, cards: list[CardEntry], *,
           role: Literal["storage", "witness"] = "storage", seq: int = 1,
           dev: bool = False, version: str = "0.1.0") -> HostReport:
    return HostReport(host=host, role=role, version=version, api="127.0.0.1:9700",
                      run=f"run-{host}", seq=seq,
                      cards=tuple(reported(c) for c in cards if c.host == host),
                      dev_cluster=dev)


def gateway(gid: str, *, generation: int = 5, namespace: str = "llama-0123456789abcdef",
            fingerprint: str = "L0123456789abcdef", placement: str = "dialog",
            host: str = "gpu1", stale: bool = False) -> bytes:
    return json.dumps({
        "schema": 1, "id": gid, "host": host, "pod": f"pod-{gid}", "namespace": namespace,
        "placement": placement, "fingerprint": fingerprint, "generation": generation,
        "engine": "vllm", "version": "0.1.0", "stale": stale,
    }).encode()


def leader(host: str = "h1", since_ago: float = 120.0) -> bytes:
    return json.dumps({"host": host, "since": iso(time.time() - since_ago),
                       "api": "127.0.0.1:9700", "run": f"run-{host}"}).encode()


def layout(namespace: str = "llama-0123456789abcdef", placement: str = "dialog") -> bytes:
    return json.dumps({"schema": 1, "namespace": namespace, "placement": placement,
                       "algorithm": 1, "slot_algorithm": 1, "created_by": "g1"}).encode()


def healthy_state(cluster: str = "c1") -> dict[str, bytes]:
    """h1 (2 cards, leader), h2 (1 card), w1 (witness); 2 gateways at the registry's generation."""
    cards = [card("h1", "card0", "SN-A1"), card("h1", "card1", "SN-A2"),
             card("h2", "card0", "SN-B1", ip="10.0.0.2")]
    reg = registry(cards, cluster=cluster)
    return {
        keys.LEADER: leader("h1"),
        keys.REGISTRY: regdoc.encode(reg),
        keys.member("h1"): reportdoc.encode(report("h1", cards)),
        keys.member("h2"): reportdoc.encode(report("h2", cards)),
        keys.member("w1"): reportdoc.encode(report("w1", [], role="witness")),
        keys.gateway("g1"): gateway("g1"),
        keys.gateway("g2"): gateway("g2", host="gpu2"),
        keys.layout("llama-0123456789abcdef"): layout(),
    }


def store_for(endpoints, cluster: str) -> EtcdStore:
    return EtcdStore(StoreConfig(endpoints=tuple(endpoints), prefix=keys.prefix(cluster)))


async def awrite(endpoints, cluster: str, state: dict[str, bytes | None]) -> None:
    store = store_for(endpoints, cluster)
    try:
        for k, v in state.items():
            if v is None:
                await store.delete(k, timeout=2.0)
            else:
                await store.put(k, v, timeout=2.0)
    finally:
        await store.close()


def write(endpoints, cluster: str, state: dict[str, bytes | None]) -> None:
    asyncio.run(awrite(endpoints, cluster, state))


__all__ = ["replace"]
