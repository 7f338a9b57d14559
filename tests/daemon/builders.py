"""Small builders of host reports and snapshots for the leader's decision tests."""

from __future__ import annotations

from awide_cluster.contract.registry import CardEntry, Registry, card_id
from awide_cluster.contract.report import HostReport, ReportedCard
from awide_cluster.daemon.reconcile import (
    ClusterSnapshot,
    Decision,
    LeaderMemory,
    Policy,
    Trigger,
    decide,
)


def card(name: str, serial: str, *, healthy: bool = True, found: bool = True,
         identity: str | None = None, reason: str = "", model: str = "dir-card") -> ReportedCard:
    return ReportedCard(
        name=name, kind="dir", found=found, serial=serial if found else "",
        model=model if found else "", identity=(identity or f"uuid-{serial}") if found else "",
        device=f"/srv/{name}", controller_state="live" if found else "",
        healthy=healthy and found, reason="" if healthy and found else reason,
        path=f"/srv/{name}",
    )


def cid(serial: str, identity: str | None = None, model: str = "dir-card") -> str:
    return card_id(serial, model, identity or f"uuid-{serial}")


def report(host: str, seq: int, *cards: ReportedCard, run: str = "run1") -> HostReport:
    return HostReport(host=host, role="storage", version="0.1.0", api="", run=run, seq=seq,
                      cards=tuple(cards))


def entry(reg: Registry | None, card_id_: str) -> CardEntry:
    """The registry's card; the test fails when there is no registry or no such card."""
    assert reg is not None, "no registry written yet"
    c = reg.card(card_id_)
    assert c is not None, f"card {card_id_} is not in the registry"
    return c


class Leader:
    """Drives ``decide`` cycle by cycle the way the shell does (written registry fed back)."""

    def __init__(self, host: str = "h1", sick_polls: int = 3, healthy_polls: int = 1) -> None:
        self.policy = Policy(cluster="c1", leader=host, sick_polls=sick_polls,
                             healthy_polls=healthy_polls)
        self.memory = LeaderMemory()
        self.registry: Registry | None = None
        self.writes = 0
        self.cycle = 0

    def step(self, *reports: HostReport, bad: dict[str, str] | None = None,
             intents=(), bad_intents=None, write_failure: str = "",
             trigger: Trigger = "poll") -> Decision:
        self.cycle += 1
        snap = ClusterSnapshot(reports={r.host: r for r in reports}, bad_reports=bad or {},
                        registry=self.registry, intents=tuple(intents),
                        bad_intents=bad_intents or {}, write_failure=write_failure,
                        trigger=trigger)
        d = decide(snap, self.memory, self.policy, now=f"t{self.cycle}")
        self.memory = d.memory
        if d.write:
            self.registry = d.registry
            self.writes += 1
        return d

    @property
    def written(self) -> Registry:
        """The registry last written; the test fails when none was."""
        assert self.registry is not None, "no registry written yet"
        return self.registry

    def new_leader(self, host: str = "h2") -> None:
        self.policy = Policy(cluster="c1", leader=host, sick_polls=self.policy.sick_polls,
                             healthy_polls=self.policy.healthy_polls)
        self.memory = LeaderMemory()

    def state(self, card_id_: str) -> str | None:
        c = self.registry.card(card_id_) if self.registry else None
        return c.state if c else None
