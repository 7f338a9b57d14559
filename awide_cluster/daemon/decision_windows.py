"""The leader's decision, the operator windows (pure): a cluster-wide pause, a host's
maintenance, a card's silence (``contract/windows.py``).

``take_windows``: the window requests read in this cycle applied to the windows in force
(``start`` sets or replaces a window until the leader's ``now`` plus its length, ``end`` ends
it), every request consumed (a bad one too), then every window past its ``until`` removed
(expired), and a silence of a card no longer in the registry dropped. Each change is one log
line and one ``WindowEvent`` (a history entry).

``hold_polls``: what the windows in force do to this cycle's observations (before they are
counted):

- paused: no bad observation counts for any card (the leader takes nothing out; a good one
  still brings a card back, drains, undrains, forgets and admissions still apply);
- a host in maintenance: its cards' observations that only say the host is absent (no report,
  a report that does not decode, a report that did not advance) do not count; a fresh report
  of the host saying a card is sick or not found still counts (the host itself says its target
  does not answer), and so does every good one.

A silence changes no decision: status shows the card muted and its exit code ignores it, the
daemon's ``awide_card_silenced`` gauge carries it to the alert rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from awide_cluster.contract.history_ring import Entry
from awide_cluster.contract.records import iso
from awide_cluster.contract.registry import CardEntry, Registry
from awide_cluster.contract.windows import (
    NONE,
    Scope,
    Window,
    WindowRequest,
    Windows,
    subject,
)
from awide_cluster.daemon.decision_model import ClusterSnapshot, Policy, Poll


@dataclass(frozen=True, slots=True)
class WindowAsk:
    """An operator's window request read from ``window-requests/...``."""

    scope: Scope
    name: str                       # the host or card id ("" for the pause)
    request: WindowRequest
    key: str                        # relative to the cluster prefix
    mod_revision: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowEvent:
    """One change of the windows (a history entry): set, ended, expired, ignored, dropped."""

    scope: Scope
    name: str
    what: str                       # the words of the log line after the subject
    by: str = ""
    why: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class TakenWindows:
    windows: Windows                # in force after this cycle
    write: bool                     # ``windows`` must be written (changed, or etcd's unusable)
    consumed: tuple[tuple[str, int], ...]
    events: tuple[WindowEvent, ...]
    log: tuple[str, ...]


def _apply(w: Windows, ask: WindowAsk, policy: Policy, cards: Mapping[str, CardEntry],
           now_ts: float, now: str) -> tuple[Windows, WindowEvent]:
    req, scope, name = ask.request, ask.scope, ask.name
    who = dict(by=req.by, why=req.reason)
    if scope == "host" and policy.hosts and name not in policy.hosts:
        return w, WindowEvent(scope=scope, name=name, what=f"{req.action} ignored: not a host "
                              "of this cluster", **who)
    if scope == "card" and name not in cards:
        return w, WindowEvent(scope=scope, name=name, what=f"{req.action} ignored: not in the "
                              "registry", **who)
    was = w.get(scope, name)
    if req.action == "end":
        if was is None or not was.live(now_ts):
            return w, WindowEvent(scope=scope, name=name, what="end: none in force", **who)
        return w.put(scope, name, None), WindowEvent(
            scope=scope, name=name, what=f"ended early (was {was.describe()})", **who)
    until = iso(now_ts + req.seconds) or now
    win = Window(by=req.by, since=now, until=until, reason=req.reason, drained=req.drained)
    verb = "set" if was is None else "replaced"
    return w.put(scope, name, win), WindowEvent(
        scope=scope, name=name, what=f"{verb} until {until} ({req.seconds} s)"
        + (", its cards drained first" if req.drained else ""), **who)


def take_windows(snap: ClusterSnapshot, policy: Policy, cards: Mapping[str, CardEntry],
                 windows: Windows | None, asks: tuple[WindowAsk, ...],
                 bad: Mapping[str, tuple[int, str]], *, now_ts: float, now: str,
                 problem: str = "") -> TakenWindows:
    """The windows after this cycle's requests and expiries (see the module's docstring).
    ``windows``: as etcd holds them (None: none yet, or unusable: ``problem`` says why, and
    they are written afresh)."""
    prev = windows if windows is not None else NONE
    w = prev
    events: list[WindowEvent] = []
    consumed: list[tuple[str, int]] = []
    for ask in sorted(asks, key=lambda a: (a.key, a.mod_revision)):
        consumed.append((ask.key, ask.mod_revision))
        w, event = _apply(w, ask, policy, cards, now_ts, now)
        events.append(event)
    for key, (rev, why) in sorted(bad.items()):
        consumed.append((key, rev))
        events.append(WindowEvent(scope="pause", name="", what=f"request {key} ignored and "
                                  f"deleted: {why}"))
    for scope, name, win in w.items():
        if not win.live(now_ts):
            w = w.put(scope, name, None)
            events.append(WindowEvent(scope=scope, name=name,
                                      what=f"expired (was {win.describe()})"))
        elif scope == "card" and name not in cards:
            w = w.put(scope, name, None)
            events.append(WindowEvent(scope=scope, name=name, what="dropped: the card left "
                                      "the registry"))
    log = [f"{subject(e.scope, e.name)} {e.what}"
           + (f" [by {e.by or '?'}" + (f": {e.why}" if e.why else "") + "]"
              if e.by or e.why else "")
           if not e.what.startswith("request ") else e.what for e in events]
    if problem:
        log.insert(0, f"windows rewritten: {problem}")
    return TakenWindows(windows=w, write=w != prev or bool(problem),
                        consumed=tuple(consumed), events=tuple(events), log=tuple(log))


def hold_polls(polls: Mapping[str, Poll], cards: Mapping[str, CardEntry],
               snap: ClusterSnapshot, windows: Windows) -> dict[str, Poll]:
    """The polls as the windows in force let them count (see the module's docstring)."""
    if windows.pause is None and not windows.hosts:
        return dict(polls)
    out: dict[str, Poll] = {}
    for cid, p in polls.items():
        c = cards.get(cid)
        host = p.source[0] if p.source is not None else (c.host if c is not None else "")
        absent = p.stale or host not in snap.reports
        if p.good is False and (windows.pause is not None
                                or (host in windows.hosts and absent)):
            out[cid] = Poll(good=None, held=True)
        else:
            out[cid] = p
    return out


def window_entries(events: tuple[WindowEvent, ...], registry: Registry, *, leader: str,
                   at: str) -> tuple[Entry, ...]:
    """The history entries of the windows' changes: kind ``intent`` (readers of the previous
    release know no other kind for an operator's action), the host or card named, the reason
    in the words of the log line (``pause set until ...``, ``host s2 expired (...)``)."""
    out: list[Entry] = []
    for e in events:
        card = registry.card(e.name) if e.scope == "card" else None
        what = e.what if e.what.startswith("request ") else f"{subject(e.scope, e.name)} {e.what}"
        out.append(Entry(
            generation=registry.generation, kind="intent", reason=what, at=at, leader=leader,
            card=card.id if card is not None else "", name=card.name if card is not None else "",
            host=(e.name if e.scope == "host" else card.host if card is not None else ""),
            by=e.by, why=e.why))
    return tuple(out)
