"""Operator windows: a cluster-wide pause, a host's maintenance, a card's silence.

Two documents, one implementation each, for writers and readers:

- ``WindowRequest`` at ``window-requests/pause``, ``window-requests/host.<host>`` or
  ``window-requests/card.<card id>``: written by the operator CLI (``awide-cluster pause``,
  ``resume``, ``host maintenance``, ``silence``, ``unsilence``), consumed by the leader like an
  intent (deleted in the registry's fenced transaction). ``start`` asks for a window of
  ``seconds``; ``end`` ends the window early.
- ``Windows`` at ``windows``: written by the leader only, in the same fenced transaction, the
  windows in force: who, since when, until when (the leader's wall clock when it applied the
  request, plus its length) and why. A window past its ``until`` is ignored by every reader
  and removed by the leader at its next cycle (a history entry says so).

Everything read is untrusted: a value that does not decode raises ``WindowRequestError`` or
``WindowsError`` naming the key and the field, and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from awide_cluster.contract import bounds, keys
from awide_cluster.contract import untrusted as u
from awide_cluster.contract.keys import BadName, check_name
from awide_cluster.contract.records import parse_time

SCHEMA_VERSION = 1
Scope = Literal["pause", "host", "card"]
RequestAction = Literal["start", "end"]
SCOPES: tuple[Scope, ...] = ("pause", "host", "card")
WINDOW_MAX_SECONDS = 7 * 24 * 3600      # the longest window one request may ask for
WINDOWS_LIMITS = u.Limits(max_bytes=bounds.WINDOWS_MAX_BYTES, max_depth=6)


class WindowRequestError(u.BadValue):
    what = "window request"
    default_problem = u.WINDOW_REQUEST_CORRUPT


class WindowsError(u.BadValue):
    what = "windows"
    default_problem = u.WINDOWS_CORRUPT


def _dumps(d: dict[str, Any]) -> bytes:
    return json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _text(d: Mapping[str, Any], name: str, limit: int, error: type[u.BadValue], key: str,
          *, required: bool = False) -> str:
    value = d.get(name, "")
    if not isinstance(value, str) or (required and not value):
        raise error(f"field {name}: missing or not a string", key=key)
    why = u.text_problem(value, limit)
    if why is not None:
        raise error(f"field {name}: {why}", key=key)
    return value


# ----------------------------------------------------------------------- requests

@dataclass(frozen=True, slots=True)
class WindowRequest:
    """An operator's request: ``start`` a window of ``seconds`` (``drained``: the CLI drained
    the host's cards first), or ``end`` it. Who (``by``), when (``at``, the writer's clock,
    informational), why (``reason``)."""

    action: RequestAction
    seconds: int = 0
    by: str = ""
    at: str = ""
    reason: str = ""
    drained: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "by", u.clean_text(self.by, u.BY_MAX))
        object.__setattr__(self, "reason", u.clean_text(self.reason, u.INTENT_REASON_MAX))
        object.__setattr__(self, "at", u.clean_text(self.at, u.TIME_TEXT_MAX))

    def encode(self) -> bytes:
        if self.action == "start" and not 1 <= self.seconds <= WINDOW_MAX_SECONDS:
            raise WindowRequestError(f"a window lasts 1 to {WINDOW_MAX_SECONDS} s, not "
                                     f"{self.seconds}")
        d: dict[str, Any] = {"action": self.action, "by": self.by, "at": self.at}
        if self.action == "start":
            d["seconds"] = self.seconds
        if self.reason:
            d["reason"] = self.reason
        if self.drained:
            d["drained"] = True
        return _dumps(d)


def request_scope(key: str) -> tuple[Scope, str]:
    """``(scope, name)`` of a request key (relative to the cluster prefix): ``("pause", "")``,
    ``("host", h)``, ``("card", id)``. Raises WindowRequestError naming the key."""
    rest = key[len(keys.WINDOW_REQUESTS):] if key.startswith(keys.WINDOW_REQUESTS) else ""
    if rest == "pause":
        return "pause", ""
    scope, dot, name = rest.partition(".")
    if not dot or scope not in ("host", "card"):
        raise WindowRequestError("key: not pause, host.<host> nor card.<card id>", key=key)
    try:
        check_name(scope, name)
    except BadName as e:
        raise WindowRequestError(f"key: {e}", key=key) from None
    return ("host" if scope == "host" else "card"), name


def decode_request(raw: bytes | str, *, key: str) -> WindowRequest:
    """Raises WindowRequestError naming the key and the field, and nothing else."""
    d = u.load(raw, error=WindowRequestError, limits=u.RECORD_LIMITS, key=key)
    action = d.get("action")
    if action not in ("start", "end"):
        raise WindowRequestError("field action: must be start or end", key=key)
    seconds = d.get("seconds", 0)
    if isinstance(seconds, bool) or not isinstance(seconds, int) or (
            action == "start" and not 1 <= seconds <= WINDOW_MAX_SECONDS):
        raise WindowRequestError(f"field seconds: not an integer of 1 to {WINDOW_MAX_SECONDS}",
                                 key=key)
    drained = d.get("drained", False)
    if not isinstance(drained, bool):
        raise WindowRequestError("field drained: not a boolean", key=key)
    return WindowRequest(
        action="start" if action == "start" else "end",
        seconds=seconds if action == "start" else 0,
        by=_text(d, "by", u.BY_MAX, WindowRequestError, key),
        at=_text(d, "at", u.TIME_TEXT_MAX, WindowRequestError, key),
        reason=_text(d, "reason", u.INTENT_REASON_MAX, WindowRequestError, key),
        drained=drained)


# ------------------------------------------------------------------------ windows

@dataclass(frozen=True, slots=True)
class Window:
    """One window in force: who asked, since when and until when (ISO-8601, the leader's
    clock when it applied the request), why, and whether the host's cards were drained."""

    by: str
    since: str
    until: str
    reason: str = ""
    drained: bool = False

    @property
    def until_ts(self) -> float | None:
        return parse_time(self.until)

    def live(self, now: float) -> bool:
        """In force at ``now`` (Unix seconds): before its ``until`` (one that cannot be read
        is over)."""
        end = self.until_ts
        return end is not None and now < end

    def describe(self) -> str:
        """``by ops@a since ... until ...: why`` (the words status and the log use)."""
        return (f"by {self.by or '?'} since {self.since or '?'} until {self.until or '?'}"
                + (f": {self.reason}" if self.reason else ""))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"by": self.by, "since": self.since, "until": self.until,
                             "reason": self.reason}
        if self.drained:
            d["drained"] = True
        return d


@dataclass(frozen=True, slots=True)
class Windows:
    """The windows in force: a pause, hosts in maintenance, cards silenced (by name/id)."""

    pause: Window | None = None
    hosts: Mapping[str, Window] = field(default_factory=dict)
    cards: Mapping[str, Window] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return self.pause is None and not self.hosts and not self.cards

    def live(self, now: float) -> Windows:
        """Only the windows in force at ``now``."""
        return Windows(pause=self.pause if self.pause is not None and self.pause.live(now)
                       else None,
                       hosts={h: w for h, w in self.hosts.items() if w.live(now)},
                       cards={c: w for c, w in self.cards.items() if w.live(now)})

    def get(self, scope: Scope, name: str = "") -> Window | None:
        if scope == "pause":
            return self.pause
        return (self.hosts if scope == "host" else self.cards).get(name)

    def put(self, scope: Scope, name: str, w: Window | None) -> Windows:
        """These windows with ``scope``/``name`` set to ``w`` (None: removed)."""
        if scope == "pause":
            return replace(self, pause=w)
        table = dict(self.hosts if scope == "host" else self.cards)
        if w is None:
            table.pop(name, None)
        else:
            table[name] = w
        if scope == "host":
            return replace(self, hosts=table)
        return replace(self, cards=table)

    def items(self) -> list[tuple[Scope, str, Window]]:
        """Every window, pause first, then hosts and cards by name."""
        out: list[tuple[Scope, str, Window]] = []
        if self.pause is not None:
            out.append(("pause", "", self.pause))
        out += [("host", h, self.hosts[h]) for h in sorted(self.hosts)]
        out += [("card", c, self.cards[c]) for c in sorted(self.cards)]
        return out


NONE = Windows()


def subject(scope: Scope, name: str) -> str:
    """How a window is named in logs, history and status: ``pause``, ``host s2``, ``card c1``."""
    return "pause" if scope == "pause" else f"{scope} {name}"


def encode(w: Windows) -> bytes:
    return _dumps({"schema": SCHEMA_VERSION,
                   "pause": w.pause.to_dict() if w.pause is not None else None,
                   "hosts": {h: x.to_dict() for h, x in sorted(w.hosts.items())},
                   "cards": {c: x.to_dict() for c, x in sorted(w.cards.items())}})


def _window(d: object, where: str, key: str) -> Window:
    if not isinstance(d, dict):
        raise WindowsError(f"field {where}: not an object", key=key)
    drained = d.get("drained", False)
    if not isinstance(drained, bool):
        raise WindowsError(f"field {where}.drained: not a boolean", key=key)
    return Window(by=_text(d, "by", u.BY_MAX, WindowsError, key),
                  since=_text(d, "since", u.TIME_TEXT_MAX, WindowsError, key),
                  until=_text(d, "until", u.TIME_TEXT_MAX, WindowsError, key, required=True),
                  reason=_text(d, "reason", u.INTENT_REASON_MAX, WindowsError, key),
                  drained=drained)


def _table(d: Mapping[str, Any], name: str, limit: int, key: str) -> dict[str, Window]:
    table = d.get(name, {})
    if not isinstance(table, dict):
        raise WindowsError(f"field {name}: not an object", key=key)
    if len(table) > limit:
        raise WindowsError(f"field {name}: {len(table)} entries, over the bound of {limit}",
                           key=key)
    out: dict[str, Window] = {}
    for n, w in table.items():
        try:
            check_name(name[:-1], n)
        except BadName as e:
            raise WindowsError(f"field {name}: {e}", key=key) from None
        out[n] = _window(w, f"{name}.{n}", key)
    return out


def decode(raw: bytes | str, *, key: str = keys.WINDOWS) -> Windows:
    """Raises WindowsError naming the key and the field, and nothing else."""
    d = u.load(raw, error=WindowsError, limits=WINDOWS_LIMITS, key=key)
    schema = d.get("schema")
    if type(schema) is not int or schema != SCHEMA_VERSION:
        raise WindowsError(f"field schema: {u.shown(schema)} is not known", key=key)
    pause = d.get("pause")
    return Windows(pause=_window(pause, "pause", key) if pause is not None else None,
                   hosts=_table(d, "hosts", bounds.WINDOWS_MAX_HOSTS, key),
                   cards=_table(d, "cards", bounds.WINDOWS_MAX_CARDS, key))
