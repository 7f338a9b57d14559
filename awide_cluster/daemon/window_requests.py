"""Operator windows from the CLI: ``awide-cluster pause|resume``, ``host maintenance``,
``silence|unsilence`` (``contract/windows.py``, ``decision_windows.py``).

The CLI writes ``window-requests/<scope>[.<name>]`` with who, when, why and how long, and waits,
bounded, until the leader applied it (the request key is gone: the leader deletes it in the
transaction that writes ``windows``), then reads what is in force and says so.
"""

from __future__ import annotations

import getpass
import re
import socket
from dataclasses import dataclass

from awide_cluster.contract import bounds, keys
from awide_cluster.contract import windows as windoc
from awide_cluster.contract.windows import Scope, Window, WindowRequest, Windows
from awide_cluster.daemon.clock import Clock
from awide_cluster.daemon.intents import IntentError, until_consumed
from awide_cluster.store.port import Store

_DURATION = re.compile(r"^\s*(\d{1,7})\s*([smhd]?)\s*$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> int:
    """Seconds of ``90``, ``90s``, ``20m``, ``2h``, ``1d``; ValueError naming the limits."""
    m = _DURATION.match(text)
    seconds = int(m.group(1)) * _UNIT[m.group(2)] if m else 0
    if not 1 <= seconds <= windoc.WINDOW_MAX_SECONDS:
        raise ValueError(f"{text!r} is not a duration of 1 s to "
                         f"{windoc.WINDOW_MAX_SECONDS // 86400} days (e.g. 90s, 20m, 2h, 1d)")
    return seconds


class NotTaken(IntentError):
    """The request was written but the leader did not apply it within the bound."""


@dataclass(frozen=True)
class Taken:
    windows: Windows                # in force once the leader applied the request
    window: Window | None           # this request's window (None: ended, or none in force)


async def read_windows(store: Store, timeout: float) -> Windows:
    """The windows in force (none when the key is absent). Raises WindowsError, StoreError."""
    kv = await store.get(keys.WINDOWS, timeout=timeout, max_value_bytes=bounds.WINDOWS_MAX_BYTES)
    return windoc.decode(kv.value) if kv is not None else windoc.NONE


def who() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


async def submit(store: Store, scope: Scope, name: str, request: WindowRequest, *,
                 clock: Clock, wait: float, poll: float, call_timeout: float) -> Taken:
    """Write the request and wait (at most ``wait`` s) until the leader consumed it.
    Raises NotTaken after the bound, StoreError, WindowsError."""
    key = keys.window_request(scope, name)
    await store.put(key, request.encode(), timeout=call_timeout)

    async def taken() -> Taken:
        now = await read_windows(store, call_timeout)
        return Taken(now, now.get(scope, name))

    got = await until_consumed(store, key, taken, clock=clock, wait=wait, poll=poll,
                               call_timeout=call_timeout, unreadable=(windoc.WindowsError,))
    if got is None:
        raise NotTaken(
            f"{windoc.subject(scope, name)} {request.action} written to etcd, but the "
            f"leader did not apply it within {wait:g} s (is a leader running?); it stays "
            "pending and the leader applies it when it can")
    return got
