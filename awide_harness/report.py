"""The tour's results: per-event outcome, figures, the JSON report and the human summary (pure).

An ``EventOutcome`` says what was done, what every gateway was expected to show, when each
gateway first showed it (seconds after the fault), the bound, the named invariant checks, and
whether all gateways agreed afterwards. An event *converged* when every gateway showed the
change within the bound and every check held; the tour converged when every event did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from awide_harness.spec import Bounds, Timing

REPORT_VERSION = 1


@dataclass(frozen=True)
class EventOutcome:
    name: str                                   # card_sick, card_back, card_added, ...
    what: str                                   # what the tour did
    expect: str                                 # what every gateway should show
    at: float                                   # seconds since the tour began (the fault)
    bound: float                                # seconds within which every gateway must show it
    seen: Mapping[str, float | None]            # gateway -> seconds after the fault (None: no)
    agreed: bool                                # all gateways showed the same table and states
    disagreement: str = ""
    checks: Mapping[str, bool] = field(default_factory=dict)
    figure: str | None = None                   # the figure this event measures
    extra: Mapping[str, Any] = field(default_factory=dict)
    # figures measured elsewhere than on the gateways (e.g. the election, read from etcd):
    # name -> {"seconds": s | None, "bound": b}
    more_figures: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def worst(self) -> float | None:
        """The slowest gateway's time, None when one did not see it (or no gateway measured)."""
        if not self.seen or any(v is None for v in self.seen.values()):
            return None
        return max(v for v in self.seen.values() if v is not None)

    @property
    def converged(self) -> bool:
        in_time = all(v is not None and v <= self.bound for v in self.seen.values())
        return in_time and all(self.checks.values())

    @property
    def ok(self) -> bool:
        return self.converged and self.agreed

    def problems(self) -> list[str]:
        out = []
        for gw, v in sorted(self.seen.items()):
            if v is None:
                out.append(f"{self.name}: gateway {gw} did not show '{self.expect}' within "
                           f"{self.bound:g} s")
            elif v > self.bound:
                out.append(f"{self.name}: gateway {gw} took {v:.3f} s (bound {self.bound:g} s)")
        for check, held in sorted(self.checks.items()):
            if not held:
                out.append(f"{self.name}: check failed: {check}")
        if not self.agreed:
            out.append(f"{self.name}: gateways disagree: {self.disagreement or 'unknown'}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "what": self.what, "expect": self.expect,
            "at": round(self.at, 3), "bound": self.bound,
            "seen": {g: (None if v is None else round(v, 3)) for g, v in sorted(self.seen.items())},
            "worst": None if self.worst is None else round(self.worst, 3),
            "converged": self.converged, "agreed": self.agreed,
            "disagreement": self.disagreement, "checks": dict(self.checks),
            "figure": self.figure, **({"extra": dict(self.extra)} if self.extra else {}),
        }


def figures(events: list[EventOutcome]) -> dict[str, dict[str, Any]]:
    """figure name -> {seconds (slowest gateway), per_gateway, bound, within_bound}."""
    out: dict[str, dict[str, Any]] = {}
    for e in events:
        for name, f in e.more_figures.items():
            secs = f.get("seconds")
            out[name] = {"seconds": secs, "per_gateway": {}, "bound": f["bound"],
                         "within_bound": secs is not None and secs <= f["bound"],
                         "event": e.name}
        if e.figure is None:
            continue
        worst = e.worst
        out[e.figure] = {
            "seconds": None if worst is None else round(worst, 3),
            "per_gateway": {g: (None if v is None else round(v, 3))
                            for g, v in sorted(e.seen.items())},
            "bound": e.bound, "within_bound": e.converged, "event": e.name,
        }
    return out


def report_doc(events: list[EventOutcome], *, timing: Timing, bounds: Bounds, quick: bool,
               cluster: Mapping[str, Any], duration: float, error: str = "") -> dict[str, Any]:
    problems = [p for e in events for p in e.problems()]
    if error:
        problems.insert(0, error)
    converged = not error and bool(events) and all(e.converged for e in events)
    agreed = bool(events) and all(e.agreed for e in events)
    return {
        "report": "awide-cluster tour", "version": REPORT_VERSION, "quick": quick,
        "converged": converged, "agreed_after_every_event": agreed,
        "ok": converged and agreed, "duration": round(duration, 3),
        "timing": {"poll_interval": timing.poll_interval, "lease_ttl": timing.lease_ttl,
                   "sick_polls": timing.sick_polls, "healthy_polls": timing.healthy_polls,
                   "call_timeout": timing.call_timeout},
        "bounds": bounds.to_dict(), "cluster": dict(cluster),
        "events": [e.to_dict() for e in events], "figures": figures(events),
        "problems": problems, "error": error,
    }


def summary(doc: Mapping[str, Any]) -> list[str]:
    """Human lines of a report document."""
    t = doc["timing"]
    mode = "quick" if doc["quick"] else "default"
    lines = [f"tour ({mode} timing: poll {t['poll_interval']:g} s, "
             f"lease TTL {t['lease_ttl']} s, {t['sick_polls']} sick polls, "
             f"call bound {t['call_timeout']:g} s) in {doc['duration']:.1f} s"]
    for e in doc["events"]:
        seen = ", ".join(f"{g} {'-' if v is None else f'{v:.2f} s'}" for g, v in e["seen"].items())
        mark = "ok " if e["converged"] and e["agreed"] else "BAD"
        lines.append(f"  {mark} {e['name']:<24} {e['what']}")
        lines.append(f"      expect: {e['expect']}; seen: {seen or 'n/a'} (bound {e['bound']:g} s)"
                     f"; {'all gateways agree' if e['agreed'] else 'gateways DISAGREE'}")
    if doc["figures"]:
        lines.append("  figures (slowest gateway / bound):")
        for name, f in doc["figures"].items():
            s = "not seen" if f["seconds"] is None else f"{f['seconds']:.2f} s"
            lines.append(f"    {name:<22} {s:>9} / {f['bound']:g} s")
    verdict = "CONVERGED: every gateway saw every change within its bound and all agreed" \
        if doc["ok"] else "NOT CONVERGED"
    lines.append(verdict)
    lines.extend(f"  problem: {p}" for p in doc["problems"])
    return lines
