"""The pieces every screen of ``status`` shares: aligned columns, durations and sizes as people
read them, the card lines, the one-word verdict (``headline``) and the one-line ``--brief``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from awide_cluster.operator.model import CardView, ClusterStatus


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
