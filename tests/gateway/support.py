"""Helpers of the gateway tests (no fixtures here: see conftest.py). ``RegistryWriter``
(plays the leader) is the harness's, shared with the benchmarks."""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from awide_cluster.contract.registry import CardEntry, card_id
from awide_cluster.contract.target import NvmeTarget
from awide_cluster.nvme.cli import NvmeCli
from awide_cluster.nvme.runner import Runner
from awide_gateway_cluster import ClusterGateway, parse_config
from awide_gateway_cluster.config import GatewayConfig
from awide_harness.fakes import FakeNvmeWorld
from awide_harness.registry_writer import RegistryWriter
from tests.timing import wait_until

MODEL = "AWIDE Fake NVMe Ctrl"


def nqn(n: int) -> str:
    return f"nqn.2024-01.io.awide:card{n}"


def make_card(n: int, *, admitted: int = 1, state: str = "in", serial: str | None = None,
              nguid: str | None = None, host: str = "s1", traddr: str = "10.200.0.11",
              port: int = 4420) -> CardEntry:
    serial = serial or f"AWIDESN{n:04d}"
    nguid = nguid or f"{n + 1:032x}"
    identity = f"nguid:{nguid}"
    return CardEntry(
        id=card_id(serial, MODEL, identity), serial=serial, model=MODEL, identity=identity,
        host=host, name=f"card{n}", kind="nvme", state=state,  # type: ignore[arg-type]
        health="ok" if state == "in" else "sick", reason="" if state == "in" else "test",
        admitted=admitted, changed_generation=admitted,
        target=NvmeTarget("tcp", traddr, port, nqn(n)),
    )


def serve(world: FakeNvmeWorld, card: CardEntry, *, serial: str | None = None) -> None:
    """Make ``world``'s fake initiator reach ``card``'s target (answering ``serial``)."""
    assert card.target is not None
    world.add_target(card.target.subnqn, serial=serial or card.serial, model=card.model,
                     traddr=card.target.traddr, trsvcid=card.target.trsvcid,
                     nguid=card.identity.removeprefix("nguid:"))


def served(world: FakeNvmeWorld, n: int) -> list[CardEntry]:
    """Cards 1..n (card k admitted at generation k), each reachable through ``world``."""
    cards = [make_card(k, admitted=k) for k in range(1, n + 1)]
    for c in cards:
        serve(world, c)
    return cards


def config(cluster: str, endpoints: tuple[str, ...], world: FakeNvmeWorld, *,
           pod: str | None = None, **over: Any) -> GatewayConfig:
    doc: dict[str, Any] = {
        "mode": "cluster", "cluster": cluster, "host": "gpu1",
        "pod": pod or f"pod-{secrets.token_hex(3)}",
        "etcd": {"endpoints": list(endpoints), "call_timeout": 0.3, "hedge_after": 0.05},
        "timing": {"poll_interval": 0.35, "sick_polls": 2, "healthy_polls": 1, "lease_ttl": 3},
        "model": {"name": "test/model-7b", "num_layers": 4},
        "nvme": {"program": "nvme", "sysfs_root": str(world.sysfs_root),
                 "command_timeout": 3.0},
        "watch": False,
        "start_timeout": 5.0,
        "vouch": False,         # these tests play the leader (no daemon reports to vouch)
    }
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(doc.get(k), dict):
            doc[k] = {**doc[k], **v}
        else:
            doc[k] = v
    return parse_config(doc)


def gateway(cfg: GatewayConfig, world: FakeNvmeWorld, **kw: Any) -> ClusterGateway:
    nvme = NvmeCli(Runner(env=world.env()), program="nvme", timeout=cfg.nvme.command_timeout)
    return ClusterGateway(cfg, nvme=nvme, **kw)


def in_service(gw: ClusterGateway, cid: str) -> bool:
    s = gw.snapshot().card(cid)
    return bool(s and s.in_service)


def argv_text(world: FakeNvmeWorld) -> str:
    return json.dumps(world.calls())


def with_state(card: CardEntry, state: str) -> CardEntry:
    return replace(card, state=state, health="ok" if state == "in" else "sick")  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def serving_gateway(etcd: Any, leader: RegistryWriter, world: FakeNvmeWorld,
                          cluster_name: str) -> AsyncIterator[tuple[ClusterGateway, CardEntry]]:
    """One served card published, a gateway started and the card in service; stopped after."""
    [a] = served(world, 1)
    await leader.publish([a])
    gw = gateway(config(cluster_name, etcd.endpoints, world), world)
    await gw.start()
    try:
        await wait_until(lambda: in_service(gw, a.id))
        yield gw, a
    finally:
        await gw.stop()
