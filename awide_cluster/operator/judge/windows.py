"""The operator windows, judged: the pause, the hosts in maintenance and the cards silenced
the leader holds in force (``windows``), the requests not applied yet (``window-requests/``),
and what they mute. Pure functions.

A window past its ``until`` by this reader's clock is not in force (the leader removes it at
its next cycle). What a window mutes: a silenced card's errors, and a host in maintenance's
errors and those of its cards, become warnings that say why (``muted``); the window itself is
a warning an operator set (exit 1 while it lasts): the exit code ignores what it mutes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from awide_cluster.contract import keys
from awide_cluster.contract import windows as windoc
from awide_cluster.contract.windows import Windows
from awide_cluster.operator.model import CardView, HostView, Problem, WindowView
from awide_cluster.store.types import KeyValue


def judge_windows(kv: dict[str, KeyValue], wall: float
                  ) -> tuple[tuple[Windows, tuple[WindowView, ...]], list[Problem]]:
    """The windows in force at ``wall`` (this reader's clock), their views and problems, and
    the requests pending."""
    problems: list[Problem] = []
    in_force = windoc.NONE
    item = kv.get(keys.WINDOWS)
    if item is not None:
        try:
            in_force = windoc.decode(item.value).live(wall)
        except windoc.WindowsError as e:
            problems.append(Problem("warning", "windows_corrupt", keys.WINDOWS,
                                    f"{e} (no pause, maintenance or silence is in force; the "
                                    "leader rewrites it at its next cycle)"))
    views = tuple(WindowView(scope=scope, name=name, by=w.by, since=w.since, until=w.until,
                             reason=w.reason, drained=w.drained)
                  for scope, name, w in in_force.items())
    for scope, name, w in in_force.items():
        problems.append(_problem(scope, name, w))
    for key, item in sorted(kv.items()):
        if not key.startswith(keys.WINDOW_REQUESTS):
            continue
        try:
            scope, name = windoc.request_scope(key)
            req = windoc.decode_request(item.value, key=key)
        except windoc.WindowRequestError as e:
            problems.append(Problem("warning", "window_request_corrupt", key, str(e)))
            continue
        problems.append(Problem(
            "warning", "window_pending", key,
            f"{windoc.subject(scope, name)} {req.action} by {req.by or '?'} not applied yet "
            "(the leader applies it at its next cycle: is there a leader?)"))
    return (in_force, views), problems


def _problem(scope: windoc.Scope, name: str, w: windoc.Window) -> Problem:
    if scope == "pause":
        return Problem("warning", "cluster_paused", "pause",
                       f"PAUSED {w.describe()}: the leader takes no card out; "
                       "`awide-cluster resume` ends it")
    if scope == "host":
        drained = " (its cards drained first)" if w.drained else ""
        return Problem("warning", "host_maintenance", name,
                       f"host {name} in maintenance {w.describe()}{drained}: its cards stay "
                       "as they are while its report is gone or frozen; `awide-cluster host "
                       f"maintenance {name} --end` ends it")
    return Problem("warning", "card_silenced", name,
                   f"card {name} silenced {w.describe()}: its problems do not count in the "
                   f"exit code; `awide-cluster unsilence {name}` ends it")


# problems that a host's maintenance mutes: about the host, or about one of its cards
HOST_CODES = frozenset({"host_down", "report_stale", "report_corrupt", "daemon_down"})
CARD_CODES = frozenset({"card_out", "card_unplaced", "card_conflict"})


def mute(problems: Iterable[Problem], cards: tuple[CardView, ...], hosts: tuple[HostView, ...],
         windows: Windows) -> tuple[list[Problem], tuple[CardView, ...], tuple[HostView, ...]]:
    """The problems, cards and hosts with what the windows mute marked (errors become
    warnings that say why)."""
    if not windows.hosts and not windows.cards:
        return list(problems), cards, hosts
    host_of = {c.id: c.host for c in cards}

    def why(p: Problem) -> str:
        if p.code in CARD_CODES and p.subject in windows.cards:
            return f"silenced {windows.cards[p.subject].describe()}"
        host = (p.subject if p.code in HOST_CODES
                else host_of.get(p.subject, "") if p.code in CARD_CODES else "")
        if host in windows.hosts:
            return f"host {host} in maintenance {windows.hosts[host].describe()}"
        return ""

    out: list[Problem] = []
    for p in problems:
        reason = why(p) if p.severity == "error" else ""
        out.append(dataclasses.replace(p, severity="warning", muted=reason,
                                       message=f"{p.message} [muted: {reason}]")
                   if reason else p)
    cards = tuple(dataclasses.replace(
        c, muted=(f"silenced {windows.cards[c.id].describe()}" if c.id in windows.cards
                  else f"host {c.host} in maintenance" if c.host in windows.hosts else ""))
        for c in cards)
    hosts = tuple(dataclasses.replace(h, maintenance=windows.hosts[h.host].describe())
                  if h.host in windows.hosts else h for h in hosts)
    return out, cards, hosts
