"""The etcd key layout. Every key is relative to the cluster prefix ``/awide/<cluster>/``."""

from __future__ import annotations

import re

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")

LEADER = "leader"
REGISTRY = "registry"
MEMBERS = "members/"
INTENTS = "intents/"
GATEWAYS = "gateways/"
LAYOUTS = "layouts/"
HISTORY = "history"             # the leader's ring of the newest registry changes
WINDOWS = "windows"             # the leader's record of pause, maintenance and silences
WINDOW_REQUESTS = "window-requests/"    # operators' pause/maintenance/silence requests
# a leader switchover: the operator's request, then the leader's hand-over (no card id is this)
SWITCHOVER = INTENTS + "switchover"


class BadName(ValueError):
    """A host, cluster, card, gateway or namespace name that cannot be a key segment."""


def check_name(what: str, value: str) -> str:
    # fullmatch: ``$`` alone would accept a trailing newline
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):
        shown = repr(value[:80] if isinstance(value, str) else value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise BadName(
            f"{what} {shown} is not a valid name: 1-63 characters of letters, digits, "
            "'.', '_' or '-', starting with a letter or digit"
        )
    return value


def prefix(cluster: str) -> str:
    return f"/awide/{check_name('cluster', cluster)}/"


def member(host: str) -> str:
    return MEMBERS + check_name("host", host)


def intent(card_id: str) -> str:
    return INTENTS + check_name("card id", card_id)


def window_request(scope: str, name: str = "") -> str:
    """``window-requests/pause``, ``window-requests/host.<host>``, ``window-requests/card.<id>``."""
    if scope == "pause":
        return WINDOW_REQUESTS + "pause"
    return WINDOW_REQUESTS + f"{scope}." + check_name(scope, name)


def gateway(gateway_id: str) -> str:
    return GATEWAYS + check_name("gateway id", gateway_id)


def layout(namespace: str) -> str:
    return LAYOUTS + check_name("namespace", namespace)


def tail(key: str, folder: str) -> str:
    """``tail('members/h1', MEMBERS) == 'h1'``."""
    if not key.startswith(folder):
        raise ValueError(f"key {key!r} is not under {folder!r}")
    return key[len(folder):]
