"""Rendering a ``ClusterStatus``: ``table`` (for people, fits 80x24), ``wide`` (everything),
``json`` and ``yaml`` (for scripts), ``brief`` (one line).

``table`` (``compact``) is the default of ``awide-cluster status``: one line each for the
verdict, etcd and the leader with the registry, a line per host and per card, the gateways as
counts with the outliers named, then the problems, wrapped or cut to what is left of the
screen; every line within the width. ``wide`` (``table`` before) is plain text, one section
per part of the cluster with every column, problems last (and a DEV CLUSTER banner first when
a host runs with dev settings). JSON and YAML are the same document,
``ClusterStatus.to_dict()``.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from awide_cluster.operator.formats import FORMATS as FORMATS
from awide_cluster.operator.formats import HEIGHT as HEIGHT
from awide_cluster.operator.formats import WIDTH as WIDTH
from awide_cluster.operator.model import (
    CardView,
    ClusterStatus,
    GatewayRecordView,
    HostView,
    Problem,
    card_to_dict,
)
from awide_cluster.operator.render_parts import (
    brief,
    card_lines,
    columns,
    duration,
    headline,
    size,
)

_WINDOW_WORD = {"pause": "!!! PAUSED", "host": "MAINTENANCE", "card": "SILENCED"}


def cut(line: str, width: int) -> str:
    """``line`` within ``width`` characters (``...`` where it was cut)."""
    return line if len(line) <= width else line[:max(width - 3, 0)] + "..."


def _clock(iso: str) -> str:
    """``HH:MM:SS`` of an ISO time (this machine's read), the text itself when it is not one."""
    try:
        return datetime.fromisoformat(iso).strftime("%H:%M:%S")
    except ValueError:
        return iso or "?"


def _names(views: Sequence[GatewayRecordView], what: str, shown: int = 3) -> str:
    named = ", ".join(v.id + (f" ({what})" if what else "") for v in views[:shown])
    return named + (f" +{len(views) - shown}" if len(views) > shown else "")


def gateway_summary(gateways: Sequence[GatewayRecordView], generation: int | None) -> str:
    """The gateways in one line: how many, how many apply the registry's generation (with a
    view that is not stale), and the outliers named (behind, stale, another fingerprint than
    most, unreadable), at most 3 of each."""
    if not gateways:
        return "GATEWAYS  none"
    readable = [g for g in gateways if not g.error]
    current = [g for g in readable if not g.stale and g.lag == 0]
    behind = [g for g in readable if not g.stale and g.lag != 0]
    stale = [g for g in readable if g.stale]
    prints = Counter(g.fingerprint for g in readable if g.fingerprint)
    usual = prints.most_common(1)[0][0] if prints else ""
    odd = [g for g in readable if g.fingerprint and g.fingerprint != usual]
    at = f" at generation {generation}" if generation is not None else ""
    parts = [f"GATEWAYS  {len(gateways)}: {len(current)}{at}"]
    if behind:
        parts.append("behind: " + ", ".join(
            f"{g.id} (gen {g.generation if g.generation is not None else '?'})"
            for g in behind[:3]) + (f" +{len(behind) - 3}" if len(behind) > 3 else ""))
    if stale:
        parts.append("stale view: " + _names(stale, ""))
    served = [g for g in readable if g.state_since]
    if served:
        parts.append("served state file: " + _names(served, ""))
    if odd:
        parts.append("other fingerprint: " + _names(odd, ""))
    unreadable = [g for g in gateways if g.error]
    if unreadable:
        parts.append("unreadable: " + _names(unreadable, ""))
    return "; ".join(parts)


def _host_note(h: HostView) -> str:
    notes = ["leader"] if h.is_leader else []
    if h.dev_cluster:
        notes.append("DEV")
    if h.restarting:
        notes.append(f"RESTARTING until {h.restarting['until'] or '?'}")
    if h.error:
        notes.append(h.error)
    return ", ".join(notes)


def _card_state(c: CardView) -> str:
    """``in``, ``OUT``, ``DRAINED`` (not ``in`` in capitals), with the health after a slash
    when it is not what the state implies (``in/sick``: counting toward out)."""
    state = c.state.upper() if c.state != "in" else c.state
    usual = "sick" if c.state == "out" else "ok"
    return state if c.health == usual else f"{state}/{c.health}"


def _card_note(c: CardView) -> str:
    """The card's reason, who drained it and why (without when: ``-o wide`` has it), ..."""
    by = re.sub(r"^(by \S+) at \S+?(: |$)", r"\1\2", c.drained_by)
    return "; ".join(x for x in (
        c.reason, f"drained {by}" if by else "",
        f"conflict: {c.conflict}" if c.conflict else "",
        f"unplaced: {c.unplaced}" if c.unplaced else "",
        f"host sees: {c.reported}"
        if c.reported not in ("ok", "") and c.reported not in c.reason else "") if x)


_NBSP = "\u00a0"


def wrap_keeping_commands(text: str, width: int, *, initial_indent: str = "",
                          subsequent_indent: str = "") -> list[str]:
    """``textwrap.wrap`` that breaks no line inside a `command` (kept whole to copy),
    unless the command alone is wider than a line."""
    parts = text.split("`")
    kept = "`".join(p.replace(" ", _NBSP) if i % 2 else p for i, p in enumerate(parts))
    return [line.replace(_NBSP, " ")
            for line in textwrap.wrap(kept, width, break_long_words=True,
                                      break_on_hyphens=False, initial_indent=initial_indent,
                                      subsequent_indent=subsequent_indent)]


def problem_lines(problems: Sequence[Problem], width: int, rows: int) -> list[str]:
    """The problems within ``rows`` lines of ``width``: each wrapped whole when all fit, else
    each on one line and the first ones wrapped as far as rows are left, else the first ones
    and a line saying how many more ``-o wide`` shows."""
    if rows <= 0 or not problems:
        return []
    whole = [wrap_keeping_commands(f"{p.severity.upper():7}  {p.code}: {p.message}",
                                   width - 2, initial_indent="  ",
                                   subsequent_indent="             ") or ["  " + p.code]
             for p in problems]
    if sum(len(w) for w in whole) <= rows:
        return [line for w in whole for line in w]
    if len(problems) > rows:
        more = len(problems) - (rows - 1)
        head = [cut(w[0], width) for w in whole[:rows - 1]]
        return head + [cut(f"  +{more} more: awide-cluster status -o wide", width)]
    spare = rows - len(problems)
    out: list[str] = []
    for w in whole:
        take = min(len(w), 1 + spare)
        spare -= take - 1
        lines = w[:take]
        if take < len(w):
            lines[-1] = cut(lines[-1] + " " + " ".join(x.strip() for x in w[take:]), width)
        out += lines
    return out


def compact(st: ClusterStatus, width: int = WIDTH, height: int = HEIGHT) -> list[str]:
    """The status in at most ``height`` lines of at most ``width`` characters, for 3 hosts, 8
    cards and the gateways summarised (more hosts or cards than fit: every one still has its
    line, and the problems get what is left, at least one line)."""
    out: list[str] = []
    when = f"   revision {st.revision or '?'} at {_clock(st.taken_at)}"
    head = f"cluster {st.cluster}: {headline(st)}"
    out.append(head + when if len(head + when) <= width else head)
    if st.dev_cluster:
        devs = ", ".join(h.host for h in st.hosts if h.dev_cluster)
        out.append(f"!!! DEV CLUSTER: {devs} - NOT FOR PRODUCTION !!!")
    if st.read_error:
        out.append(f"note: {st.read_error}")
    for w in st.windows:        # each on at most 2 lines: who, until when and why
        out += textwrap.wrap(f"{_WINDOW_WORD.get(w.scope, w.scope)} {w.name} by {w.by or '?'} "
                             f"until {w.until}: {w.reason}", width, subsequent_indent="  ")[:2]

    e = st.etcd
    answered = sum(1 for m in e.members if m.reachable)
    seen = f", {answered} answering" if answered > e.up else ""
    margin = e.margin if e.margin else f"{e.up}/{e.total} up"
    out.append(f"ETCD  quorum {e.quorum} ({margin}{seen}), raft leader {e.leader or 'none'}")
    down = [f"{m.name or m.endpoint} ({m.error or 'down'})" for m in e.members
            if not m.reachable or m.error]
    if down:
        out.append("  down: " + "; ".join(down))
    if e.alarms:
        out.append("  ALARMS  " + ", ".join(f"{a.alarm} (raised by {a.member})"
                                            for a in e.alarms))

    if st.leader is None:
        lead = "LEADER  none"
    elif st.leader.error:
        lead = f"LEADER  unreadable: {st.leader.error}"
    else:
        held = f" for {duration(st.leader.held_for)}" if st.leader.held_for is not None else ""
        lead = f"LEADER  {st.leader.host}{held}"
    r = st.registry
    reg = (f"REGISTRY  {r.error}" if r.error else
           f"REGISTRY  generation {r.generation}, {r.cards} cards, {r.slots_used}/8 slots")
    out.append(f"{lead}   {reg}")

    out += columns(("HOST", "ROLE", "VERSION", "REPORT", "CARDS", "NOTE"), [
        (h.host, h.role, h.version, h.report_age.describe() if h.report_age else "-",
         h.cards, _host_note(h)) for h in st.hosts], indent="") if st.hosts \
        else ["HOSTS  none"]
    out += columns(("SLOT", "CARD", "HOST/NAME", "STATE", "NOTE"), [
        ("-" if c.slot is None else c.slot, c.id, f"{c.host}/{c.name}", _card_state(c),
         _card_note(c)) for c in st.cards], indent="") if st.cards else ["CARDS  none"]
    out += textwrap.wrap(gateway_summary(st.gateways, st.registry.generation), width,
                         subsequent_indent="  ")[:2]
    if st.intents:
        i = st.intents[0]
        first = (f"{i.action} {i.card_id} by {i.by or '?'}"
                 f" ({i.age.describe() if i.age else '?'})")
        more = f" +{len(st.intents) - 1} more" if len(st.intents) > 1 else ""
        out.append(f"INTENTS  {len(st.intents)} pending: {first}{more}")
    if st.problems:
        out.append("PROBLEMS")
        out += problem_lines(st.problems, width, max(height - len(out), 1))
    else:
        out.append("PROBLEMS  none")
    return [cut(line, width) for line in out]


def table(st: ClusterStatus, width: int = WIDTH, height: int = HEIGHT) -> str:
    """The default ``status`` screen (``compact``), as one text."""
    return "\n".join(compact(st, width, height))


HISTORY_HEAD = "HISTORY  (newest last; `awide-cluster history` for all)"
HISTORY_NONE = "HISTORY  (new entries appear here as the leader records them)"


def watch_table(st: ClusterStatus, recent: Sequence[str], width: int = WIDTH,
                height: int = HEIGHT) -> list[str]:
    """``status --watch``'s screen: ``compact`` with the history entries that arrived
    meanwhile under it (``recent``, oldest first), the newest that fit in ``height``; the
    problems keep their rows first (the history gets at most 3 of theirs). The entries are
    whole: ``fit_screen`` cuts them on a terminal, a pipe gets them as they are."""
    reserve = 1 + min(len(recent), 3)
    body = compact(st, width, max(height - reserve, 1))
    room = height - len(body) - 1
    if room < 0:
        return body
    shown = list(recent)[-room:] if room else []
    return body + [HISTORY_HEAD if recent else HISTORY_NONE] + ["  " + line for line in shown]


def fit_screen(lines: Sequence[str], width: int, height: int) -> list[str]:
    """Any text on a screen of ``width`` x ``height`` without wrapping or scrolling: lines
    cut to the width, and past the height the last line says how many more there are."""
    lines = [cut(line, width) for line in lines]
    if len(lines) <= height:
        return lines
    keep = max(height - 1, 0)
    return lines[:keep] + [cut(f"... {len(lines) - keep} more lines (a larger terminal, or "
                               "without --watch)", width)]


def redraw(lines: Sequence[str]) -> str:
    """One frame drawn over the last on a terminal: cursor home, each line cleared to its
    end, the rest of the screen cleared; no newline after the last line, so a frame as tall
    as the screen does not scroll it."""
    return "\x1b[H" + "\x1b[K\n".join(lines) + "\x1b[K\x1b[J"


def wide(st: ClusterStatus) -> str:
    """Everything: each section with all its columns (``status -o wide``)."""
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
             g.error or "; ".join(n for n in (
                 "stale view" if g.stale else "",
                 ("serving state file" if not g.state_until else "served state file")
                 if g.state_since else "") if n))
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
        import yaml  # only for this format
        return yaml.safe_dump(st.to_dict(), sort_keys=False).rstrip()
    if fmt == "table":
        return table(st)
    if fmt == "wide":
        return wide(st)
    if fmt == "brief":
        return brief(st)
    raise ValueError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")


def render_cards(st: ClusterStatus, fmt: str) -> str:
    doc = {"cluster": st.cluster, "registry_generation": st.registry.generation,
           "cards": [card_to_dict(c) for c in st.cards]}
    if fmt == "json":
        return json.dumps(doc, indent=2)
    if fmt == "yaml":
        import yaml  # only for this format
        return yaml.safe_dump(doc, sort_keys=False).rstrip()
    if fmt in ("table", "wide"):
        gen = st.registry.generation
        head = f"cluster {st.cluster}, registry generation {gen if gen is not None else '?'}"
        if st.registry.error:
            head += f" ({st.registry.error})"
        return "\n".join([head] + card_lines(st.cards))
    raise ValueError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
