"""The host report: this host's cards observed, turned into ``members/<host>``.

``CardObserver`` is what the daemon asks about one configured card each poll;
``LocalObserver`` is the real one (``cards.observe`` with the runner and sysfs passed in).
Tests pass their own observer or a runner with fake programs; nothing here is patched.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from awide_cluster.cards.model import DISCOVERY, CardObservation, ProbeResult, summarize
from awide_cluster.cards.spec import CardSpec
from awide_cluster.contract.report import HostReport, ProbeLine, ReportedCard
from awide_cluster.daemon.clock import Clock


class CardObserver(Protocol):
    async def observe(self, spec: CardSpec, known_identity: str | None) -> CardObservation: ...


class LocalObserver:
    """Discovery and probes of local cards (``awide_cluster.cards.observe``)."""

    def __init__(self, runner, sysfs, clock: Clock, *, nvme_program: str = "nvme") -> None:
        self.runner, self.sysfs, self.clock = runner, sysfs, clock
        self.nvme_program = nvme_program

    async def observe(self, spec: CardSpec, known_identity: str | None) -> CardObservation:
        from awide_cluster.cards.observe import observe
        return await observe(spec, self.runner, self.sysfs, known_identity,
                             self.clock.monotonic, nvme_program=self.nvme_program)


async def observe_all(observer: CardObserver, specs: tuple[CardSpec, ...],
                      known: dict[str, str]) -> list[CardObservation]:
    """Every card concurrently, each bounded (its probes are bounded by ``probe_timeout``;
    this is the net under them). ``known`` (name -> identity first seen) is updated."""

    async def one(spec: CardSpec) -> CardObservation:
        try:
            async with asyncio.timeout(spec.probe_timeout + 0.5):
                return await observer.observe(spec, known.get(spec.name))
        except TimeoutError:
            why = f"card not found: observation did not finish within {spec.probe_timeout:g} s"
        except Exception as e:  # noqa: BLE001 - one card's trouble never stops the report
            why = f"card not found: observation failed: {type(e).__name__}: {e}"
        return summarize(spec.name, None, [ProbeResult(DISCOVERY, False, why, 0.0)])

    results = await asyncio.gather(*(one(s) for s in specs))
    for spec, obs in zip(specs, results):
        if obs.card is not None and obs.card.identity and spec.name not in known:
            known[spec.name] = obs.card.identity
    return list(results)


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def to_reported(spec: CardSpec, obs: CardObservation) -> ReportedCard:
    c = obs.card
    probes = tuple(ProbeLine(p.probe, p.ok, _cut(p.reason, 1024), round(p.elapsed, 4))
                   for p in obs.probes)
    path = str(spec.path) if spec.path is not None else None
    if c is None:
        return ReportedCard(
            name=spec.name, kind=spec.kind, found=False, serial="", model="", identity="",
            device="", controller_state="", healthy=False, reason=_cut(obs.reason, 1024),
            target=spec.target, path=path, probes=probes)
    return ReportedCard(
        name=spec.name, kind=spec.kind, found=True, serial=c.serial, model=c.model,
        identity=c.identity or "", device=_cut(c.device or "", 4096),
        controller_state=_cut(c.controller_state or "", 32), healthy=obs.healthy,
        reason="" if obs.healthy else _cut(obs.reason, 1024),
        target=c.target if c.target is not None else spec.target, path=path, probes=probes)


def build_report(*, host: str, role: str, version: str, api: str, run: str, seq: int,
                 dev_cluster: bool, specs: tuple[CardSpec, ...],
                 observations: list[CardObservation]) -> HostReport:
    return HostReport(host=host, role=role, version=version, api=api, run=run, seq=seq,
                      dev_cluster=dev_cluster,
                      cards=tuple(to_reported(s, o) for s, o in zip(specs, observations)))
