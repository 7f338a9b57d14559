"""Rendering a ``ClusterStatus``: ``table`` (for people), ``json`` and ``yaml`` (for scripts).

The table is plain text, one section per part of the cluster, problems last (and a DEV
CLUSTER banner first when a host runs with dev settings). JSON and YAML are the same document,
``ClusterStatus.to_dict()``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import yaml

from awide_cluster.operator.model import CardView, ClusterStatus, card_to_dict

FORMATS = ("table", "json", "yaml")        # and "brief" (status --brief): one line


def columns(headers: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "  ") -> list[str]:
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip()
            for r in cells]


def duration(seconds: float | None) -> str:
    if seconds is None or seconds < 0:
        return "?"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def size(n: int | None) -> str:
    if n is None:
        return ""
    value = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return str(value)


def _since(card: CardView) -> str:
    parts = []
    if card.changed_generation is not None:
        parts.append(f"gen {card.changed_generation}")
    if card.since:
        parts.append(card.since)
    return " ".join(parts)


def card_lines(cards: Sequence[CardView]) -> list[str]:
    if not cards:
        return ["  (no cards)"]
    rows = []
    for c in cards:
        notes = "; ".join(x for x in (
            c.reason, f"drained {c.drained_by}" if c.drained_by else "",
            _hold_note(c.hold),
            f"conflict: {c.conflict}" if c.conflict else "",
            f"unplaced: {c.unplaced}" if c.unplaced else "",
            f"host sees: {c.reported}"
            if c.reported not in ("ok", "") and c.reported not in c.reason else "") if x)
        rows.append((
            "-" if c.slot is None else c.slot, c.id, c.serial, c.host, c.name, c.target,
            c.state.upper() if c.state != "in" else c.state, c.health, _since(c), notes))
    return columns(("SLOT", "ID", "SERIAL", "HOST", "NAME", "TARGET", "STATE", "HEALTH",
                    "SINCE", "REASON"), rows)


def _hold_note(hold: dict[str, Any] | None) -> str:
    """A held card's hold-off left (flap damping), "" when it is not held."""
    if hold is None or not hold.get("active"):
        return ""
    left = hold.get("remaining")
    return "hold-off " + (f"{left:g} s left" if left is not None else "running")


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def headline(st: ClusterStatus) -> str:
    """``HEALTHY``, ``HEALTHY (2 warnings)``, ``WARN (1 set by an operator: card_drained)``,
    ``WARN (1 down: daemon_down)`` or ``UNHEALTHY (3 problems)``: what the exit code says, in
    words."""
    warnings = len(st.problems) - len(st.errors)
    if st.verdict == "unhealthy":
        return f"UNHEALTHY ({_count(len(st.errors), 'problem')})"
    if st.verdict == "warn":
        parts = []
        if st.operator_set:
            codes = ", ".join(sorted({p.code for p in st.operator_set}))
            parts.append(f"{len(st.operator_set)} set by an operator: {codes}")
        down = [p for p in st.holding if not p.operator_set]
        if down:
            parts.append(f"{len(down)} down: {', '.join(sorted({p.code for p in down}))}")
        return f"WARN ({'; '.join(parts)})"
    return f"HEALTHY ({_count(warnings, 'warning')})" if warnings else "HEALTHY"


BRIEF_MAX = 200     # characters of the --brief line


def brief(st: ClusterStatus) -> str:
    """One line for prompts and scripts: ``CLUSTER STATE: what counts``, the same verdict as
    the exit code (``OK``, ``WARNING``, ``CRITICAL``), e.g. ``demo WARNING: card_drained
    SN1 (by ops@h1); 3 hosts, 8 cards (7 in), quorum 3/3``."""
    counted = st.errors or st.holding
    said = "; ".join(f"{p.code} {p.subject}" for p in counted[:3])
    if len(counted) > 3:
        said += f"; +{len(counted) - 3} more"
    cards_in = sum(1 for c in st.cards if c.state == "in")
    facts = (f"{_count(len(st.hosts), 'host')}, {_count(len(st.cards), 'card')} "
             f"({cards_in} in), quorum {st.etcd.up}/{st.etcd.total}")
    line = f"{st.cluster} {st.state}: " + (f"{said}; {facts}" if said else facts)
    return line if len(line) <= BRIEF_MAX else line[:BRIEF_MAX - 3] + "..."


_WINDOW_WORD = {"pause": "!!! PAUSED", "host": "MAINTENANCE", "card": "SILENCED"}


def table(st: ClusterStatus) -> str:
    out: list[str] = []
    verdict = headline(st)
    out.append(f"cluster {st.cluster}: {verdict}   etcd revision {st.revision or '?'}   "
               f"at {st.taken_at}")
    if st.dev_cluster:
        devs = ", ".join(h.host for h in st.hosts if h.dev_cluster)
        out.append("")
        out.append(f"!!! DEV CLUSTER: {devs} run with dev_cluster: true - NOT FOR PRODUCTION !!!")
    if st.read_error:
        out.append(f"note: {st.read_error}")
    out += [f"{_WINDOW_WORD.get(w.scope, w.scope)} {w.name} by {w.by or '?'} until {w.until}: "
            f"{w.reason}".replace("  ", " ")[:80] for w in st.windows]

    e = st.etcd
    out.append("")
    answered = sum(1 for m in e.members if m.reachable)
    seen = f", {answered} answering" if answered > e.up else ""
    margin = e.margin if e.margin else f"{e.up}/{e.total} up"
    out.append(f"ETCD  quorum {e.quorum} ({margin}{seen})   raft leader "
               f"{e.leader or 'none'}   term {e.raft_term if e.raft_term is not None else '?'}")
    if e.alarms:
        out.append("  ALARMS  " + ", ".join(f"{a.alarm} (raised by {a.member})"
                                            for a in e.alarms))
    out += columns(("MEMBER", "ENDPOINT", "ID", "LEADER", "TERM", "VERSION", "DB", "IN USE",
                    "QUOTA", "STATUS"), [
        (m.name or "?", m.endpoint, m.id, "*" if m.is_leader else "",
         m.raft_term if m.raft_term is not None else "", m.version, size(m.db_size),
         size(m.db_size_in_use), size(m.quota),
         "ok" if m.reachable and not m.error else (m.error or "down"))
        for m in e.members])

    out.append("")
    if st.leader is None:
        out.append("LEADER  none")
    elif st.leader.error:
        out.append(f"LEADER  unreadable: {st.leader.error}")
    else:
        held = f" (for {duration(st.leader.held_for)})" if st.leader.held_for is not None else ""
        out.append(f"LEADER  {st.leader.host} since {st.leader.since or '?'}{held}"
                   f"{'   api ' + st.leader.api if st.leader.api else ''}")

    r = st.registry
    if r.error:
        out.append(f"REGISTRY  {r.error}")
    else:
        out.append(f"REGISTRY  generation {r.generation}, written by {r.leader} at "
                   f"{r.written_at or '?'}, {r.cards} cards, {r.slots_used}/8 slots used")

    out.append("")
    out.append("HOSTS")
    out += columns(("HOST", "ROLE", "VERSION", "CARDS", "REPORT AGE", "LEADER", "API", "NOTE"), [
        (h.host, h.role, h.version, h.cards, h.report_age.describe() if h.report_age else "-",
         "*" if h.is_leader else "", h.api, ("DEV " if h.dev_cluster else "")
         + (f"RESTARTING until {h.restarting['until'] or '?'} " if h.restarting else "")
         + h.error)
        for h in st.hosts]) if st.hosts else ["  (no hosts)"]

    out.append("")
    out.append("CARDS")
    out += card_lines(st.cards)

    out.append("")
    out.append("GATEWAYS")
    if st.gateways:
        out += columns(("ID", "HOST", "POD", "NAMESPACE", "PLACEMENT", "FINGERPRINT", "GEN",
                        "LAG", "ENGINE", "NOTE"), [
            (g.id, g.host, g.pod, g.namespace, g.placement, g.fingerprint,
             g.generation if g.generation is not None else "?",
             g.lag if g.lag is not None else "?", g.engine,
             g.error or ("stale view" if g.stale else ""))
            for g in st.gateways])
    else:
        out.append("  (no gateways)")

    if st.intents:
        out.append("")
        out.append("INTENTS (pending)")
        out += columns(("CARD", "ACTION", "BY", "AGE", "REASON"), [
            (i.card_id, i.action, i.by, i.age.describe() if i.age else "-",
             i.reason or i.error) for i in st.intents])

    out.append("")
    if st.problems:
        out.append("PROBLEMS")
        for p in st.problems:
            out.append(f"  {p.severity.upper():7}  {p.code}: {p.message}")
    else:
        out.append("PROBLEMS  none")
    return "\n".join(out)


def render(st: ClusterStatus, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(st.to_dict(), indent=2)
    if fmt == "yaml":
        return yaml.safe_dump(st.to_dict(), sort_keys=False).rstrip()
    if fmt == "table":
        return table(st)
    if fmt == "brief":
        return brief(st)
    raise ValueError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")


def render_cards(st: ClusterStatus, fmt: str) -> str:
    doc = {"cluster": st.cluster, "registry_generation": st.registry.generation,
           "cards": [card_to_dict(c) for c in st.cards]}
    if fmt == "json":
        return json.dumps(doc, indent=2)
    if fmt == "yaml":
        return yaml.safe_dump(doc, sort_keys=False).rstrip()
    if fmt == "table":
        gen = st.registry.generation
        head = f"cluster {st.cluster}, registry generation {gen if gen is not None else '?'}"
        if st.registry.error:
            head += f" ({st.registry.error})"
        return "\n".join([head] + card_lines(st.cards))
    raise ValueError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
