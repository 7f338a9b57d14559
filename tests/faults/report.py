"""The campaign report: a JSON document, a text summary and a Markdown table (pure).

``build(...)`` turns the record and the checkers' ``Result`` into one dict (what
``--report FILE`` writes); ``summary(report)`` is what the runner prints; ``markdown(report)``
is the table kept in docs/reliability.md.
"""

from __future__ import annotations

import statistics
from typing import Any

from tests.faults.campaign_record import Recorded, log_around
from tests.faults.invariants import INVARIANTS, Bounds, Result
from tests.faults.schedule import KINDS


def _stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"min": None, "median": None, "max": None}
    return {"min": round(min(values), 3), "median": round(statistics.median(values), 3),
            "max": round(max(values), 3)}


def build(*, seed: int, requested: int, quick: bool, mode: str, mode_note: str,
          rec: Recorded, result: Result, bounds: Bounds, timing: dict[str, Any],
          started: float, ended: float, topology: dict[str, Any],
          replay: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    by_kind: dict[str, dict[str, Any]] = {}
    faults = []
    for f in rec.faults:
        heal = result.heal_times.get(f.index)
        row = by_kind.setdefault(f.kind, {"injected": 0, "skipped": 0, "heal": []})
        if f.skipped:
            row["skipped"] += 1
        else:
            row["injected"] += 1
            if heal is not None:
                row["heal"].append(heal)
        faults.append({
            "index": f.index, "kind": f.kind, "target": f.target, "hold": round(f.hold, 3),
            "heal_time": None if heal is None else round(heal, 3),
            "skipped": f.skipped or None, "detail": f.detail or None,
            "at": round(f.t_inject - rec.t0, 3),
        })
    kinds = {}
    for kind in KINDS:
        row = by_kind.get(kind, {"injected": 0, "skipped": 0, "heal": []})
        kinds[kind] = {"injected": row["injected"], "skipped": row["skipped"],
                       "heal_time": _stats(row["heal"])}
    per_inv = {inv: {"checks": result.checks.get(inv, 0),
                     "violations": sum(1 for v in result.violations if v.invariant == inv)}
               for inv in INVARIANTS}
    kind_of = {f.index: f.kind for f in rec.faults}
    violations = [{
        "invariant": v.invariant, "at": round(v.t - rec.t0, 3), "fault": v.fault,
        "fault_kind": kind_of.get(v.fault) if v.fault is not None else None,
        "what": v.what, "seed": seed, "replay": replay,
        "log": log_around(rec.log, v.t, t0=rec.t0),
    } for v in result.violations]
    heals = [h for h in result.heal_times.values() if h is not None]
    polls = [p.duration for p in rec.polls]
    access = [a.accessor_max for a in rec.access]
    lag = [a.loop_lag_max for a in rec.access]
    return {
        "seed": seed, "faults_requested": requested, "quick": quick,
        "mode": mode, "mode_note": mode_note, "topology": topology,
        "duration_s": round(ended - started, 1),
        "timing": timing, "bounds": bounds.as_dict(),
        "faults_injected": sum(1 for f in rec.faults if not f.skipped),
        "faults_skipped": sum(1 for f in rec.faults if f.skipped),
        "kinds": kinds, "invariants": per_inv,
        "checks_total": sum(result.checks.values()),
        "violations_total": len(result.violations),
        "heal_time": _stats(heals),
        "gateway_poll_s": _stats(polls), "accessor_s": _stats(access),
        "loop_lag_s": _stats(lag),
        "registry_revisions": len(rec.registry),
        "faults": faults, "violations": violations,
        "replay": replay, **(extra or {}),
    }


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def kind_rows(report: dict[str, Any]) -> list[str]:
    lines = ["| fault kind | injected | heal time min / median / max (s) |",
             "|---|---:|---|"]
    for kind, row in report["kinds"].items():
        h = row["heal_time"]
        lines.append(f"| {kind} | {row['injected']} | {_fmt(h['min'])} / {_fmt(h['median'])} / "
                     f"{_fmt(h['max'])} |")
    return lines


def invariant_rows(report: dict[str, Any]) -> list[str]:
    lines = ["| invariant | checks | violations |", "|---|---:|---:|"]
    for inv, row in report["invariants"].items():
        lines.append(f"| {inv} | {row['checks']} | {row['violations']} |")
    return lines


def markdown(report: dict[str, Any]) -> str:
    head = (f"Seed {report['seed']}, {report['faults_injected']} faults "
            f"({report['faults_skipped']} skipped), {report['duration_s']} s, mode "
            f"{report['mode']}; {report['checks_total']} checks, "
            f"{report['violations_total']} violations.")
    return "\n".join([head, "", *kind_rows(report), "", *invariant_rows(report)]) + "\n"


def summary(report: dict[str, Any]) -> str:
    out = [f"fault campaign: seed {report['seed']}, mode {report['mode']}"
           + (f" ({report['mode_note']})" if report["mode_note"] else ""),
           f"  {report['faults_injected']} faults injected, {report['faults_skipped']} skipped, "
           f"{report['duration_s']} s",
           "", *kind_rows(report), "", *invariant_rows(report), ""]
    gp, ac, lag = report["gateway_poll_s"], report["accessor_s"], report["loop_lag_s"]
    out.append(f"gateway poll max {_fmt(gp['max'])} s, accessor max {_fmt(ac['max'])} s, "
               f"event-loop lag max {_fmt(lag['max'])} s; bounds {report['bounds']}")
    flap = report.get("card_flap")
    if flap:
        out.append(f"card_flap: the registry took the card out in {flap['card_taken_out']} of "
                   f"{flap['faults']} flaps (hysteresis: {report['timing'].get('sick_polls')} "
                   "sick polls in a row)")
    for v in report["violations"]:
        out.append("")
        out.append(f"VIOLATION {v['invariant']} at {v['at']} s (fault #{v['fault']} "
                   f"{v['fault_kind']}): {v['what']}")
        out.append(f"  replay: {v['replay']}")
        out.extend("    " + line for line in v["log"])
    out.append("")
    out.append("RESULT: " + ("OK, no violation" if not report["violations"] else
                             f"{len(report['violations'])} violation(s)"))
    return "\n".join(out)
