"""Operator intents: ``awide-cluster drain|undrain|forget CARD``, ``card clear-hold CARD``.

The CLI names a card (its id, its serial, or ``host/name``), says what will happen
(``plan``), for ``forget`` checks that no host still reports the card (``reporting``) and
asks, then writes ``intents/<card id>`` with who, when and why, and waits, bounded, until the
leader applied it (the registry reflects it and the intent key is gone), then says what
changed. The leader applies and deletes the intent in the same fenced transaction that writes
the registry (see ``leader.py``), and logs it with who and why.
"""

from __future__ import annotations

import asyncio
import getpass
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from awide_cluster.contract import bounds, keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract import report as reportdoc
from awide_cluster.contract import slots as slotfn
from awide_cluster.contract.records import IntentRecord
from awide_cluster.contract.registry import CardEntry, Registry
from awide_cluster.daemon.clock import Clock
from awide_cluster.daemon.reconcile import describe, reported_id
from awide_cluster.store.errors import StoreError
from awide_cluster.store.port import Store

T = TypeVar("T")


class IntentError(Exception):
    """The intent cannot be given (unknown or ambiguous card, no registry)."""


class UnknownCard(IntentError):
    pass


class AmbiguousCard(IntentError):
    pass


class NotApplied(IntentError):
    """The intent was written but the registry did not reflect it within the bound."""


def resolve(reg: Registry, text: str) -> CardEntry:
    """The one card ``text`` names: card id, serial, or host/name. Error names candidates."""
    by_id = reg.card(text)
    if by_id is not None:
        return by_id
    if "/" in text:
        host, _, name = text.partition("/")
        found = [c for c in reg.cards if c.host == host and c.name == name]
    else:
        found = [c for c in reg.cards if c.serial == text]
    if len(found) == 1:
        return found[0]
    if not found:
        known = ", ".join(f"{c.id} ({c.serial}, {c.host}/{c.name})" for c in reg.cards)
        raise UnknownCard(f"no card {text!r} in the registry (generation {reg.generation}); "
                          f"cards: {known or 'none'}")
    raise AmbiguousCard(f"{text!r} names {len(found)} cards: "
                        + ", ".join(f"{c.id} ({c.serial} on {c.host}/{c.name}, {c.state})"
                                    for c in found) + "; give the card id")


def changes(action: str, card: CardEntry, before: Registry, after: Registry) -> list[str]:
    """Lines saying what the intent changed."""
    lines = []
    now = after.card(card.id)
    if now is None:
        lines.append(f"{describe(card)} forgotten (registry generation {after.generation})")
    elif action == "forget" and now.admitted != card.admitted:
        lines.append(f"{describe(card)} forgotten, then admitted again as {now.state} at "
                     f"generation {now.admitted}: its host still reports it")
    elif action == "clear-hold":
        was = "hold cleared" if card.hold is not None else "no hold"
        lines.append(f"{describe(card)}: {was}; {card.state} -> {now.state} "
                     f"(registry generation {after.generation})")
    elif now.state != card.state:
        lines.append(f"{describe(card)}: {card.state} -> {now.state} "
                     f"(registry generation {after.generation})")
    else:
        lines.append(f"{describe(card)}: {action} changed nothing (state {now.state})")
    for m in slotfn.moves(before.slots, after.slots):
        who = after.card(m.card_id) or before.card(m.card_id)
        name = describe(who) if who else f"card {m.card_id}"
        lines.append(f"{name}: {_place(m.old)} -> {_place(m.new)}")
    return lines


def _place(s: int | None) -> str:
    return "no slot" if s is None else f"slot {s}"


def plan(action: str, card: CardEntry, reg: Registry) -> list[str]:
    """What the intent will do, said before it is written (pure)."""
    slot = reg.slots.slot_of(card.id)
    head = (f"card {card.id} ({card.host}/{card.name}, serial {card.serial}), state "
            f"{card.state}, {_place(slot)}")
    if action == "drain":
        if card.state == "drained":
            return [f"{head}: already drained, nothing changes"]
        return [f"{head}: will be drained: it leaves service (every gateway stops using it; "
                f"its conversations are computed again), keeps {_place(slot)}, and stays "
                f"out until `awide-cluster undrain {card.id}`"]
    if action == "clear-hold":
        h = card.hold
        if h is None:
            return [f"{head}: no flap-damping hold, nothing changes"]
        return [f"{head}: hold {h.level} of {h.seconds:g} s"
                + (f" (until {h.until})" if h.active and h.until else "")
                + (" running" if h.active else " over")
                + ": will be cleared (the card returns at once if its host reports it "
                "healthy; its next flaps count from none)"]
    if action == "undrain":
        if card.state != "drained":
            return [f"{head}: not drained, nothing changes"]
        return [f"{head}: will be undrained: in if its host reports it healthy, else out"]
    after = regdoc.slot_table(tuple(c for c in reg.cards if c.id != card.id), reg.slots)
    lines = [f"{head}: will be forgotten: it leaves the registry"
             + (f" and {_place(slot)} is freed" if slot is not None else "")]
    for m in slotfn.moves(reg.slots, after):
        if m.card_id == card.id:
            continue
        other = reg.card(m.card_id)
        name = describe(other) if other else f"card {m.card_id}"
        lines.append(f"  then {name}: {_place(m.old)} -> {_place(m.new)}")
    return lines


@dataclass(frozen=True)
class Reporting:
    """Which hosts report a card now (``hosts``), and the reports that could not be read
    (``unreadable``: host -> why), so that "nobody reports it" is never a guess."""

    hosts: tuple[str, ...]
    unreadable: tuple[tuple[str, str], ...]

    @property
    def live(self) -> bool:
        return bool(self.hosts)

    @property
    def certain(self) -> bool:
        return self.live or not self.unreadable


async def reporting(store: Store, card_id: str, timeout: float) -> Reporting:
    """Every host report, read bounded (``members/``, each value at most its bound): the
    hosts whose report holds the card as found. Raises StoreError when etcd does not answer."""
    read = await store.read_prefix(keys.MEMBERS, max_keys=bounds.MEMBERS_MAX_KEYS,
                                   max_value_bytes=bounds.REPORT_MAX_BYTES, timeout=timeout)
    hosts: list[str] = []
    unreadable: list[tuple[str, str]] = [(keys.tail(k, keys.MEMBERS), r.why)
                                         for k, r in read.refused.items()]
    if read.more:
        unreadable.append(("...", f"{read.count} reports, over the bound of {read.max_keys}"))
    for kv in read.kvs:
        host = keys.tail(kv.key, keys.MEMBERS)
        try:
            r = reportdoc.decode(kv.value)
        except reportdoc.ReportError as e:
            unreadable.append((host, str(e)))
            continue
        if any(reported_id(c) == card_id for c in r.cards):
            hosts.append(host)
    return Reporting(tuple(sorted(hosts)), tuple(sorted(unreadable)))


@dataclass(frozen=True)
class Result:
    card: CardEntry
    before: Registry
    after: Registry | None
    lines: tuple[str, ...]


class NoRegistry(IntentError):
    """No registry in etcd yet."""


async def read_registry(store: Store, timeout: float) -> Registry:
    kv = await store.get(keys.REGISTRY, timeout=timeout)
    if kv is None:
        raise NoRegistry("no registry in etcd yet: is a daemon running for this cluster?")
    return regdoc.decode(kv.value)


async def submit(store: Store, action: str, text: str, *, clock: Clock, wait: float,
                 poll: float, call_timeout: float, by: str | None = None,
                 reason: str = "") -> Result:
    """Write the intent and wait (at most ``wait`` s) until the leader consumed it (the
    intent key is deleted in the transaction that writes the registry).
    Raises IntentError (NotApplied after the bound), StoreError, RegistryError."""
    before = await read_registry(store, call_timeout)
    card = resolve(before, text)
    if by is None:
        by = f"{getpass.getuser()}@{socket.gethostname()}"
    record = IntentRecord(action, by=by, at=clock.wall(), reason=reason)
    await store.put(keys.intent(card.id), record.encode(), timeout=call_timeout)

    async def applied() -> Result:
        after = await read_registry(store, call_timeout)
        return Result(card, before, after, tuple(changes(action, card, before, after)))

    got = await until_consumed(store, keys.intent(card.id), applied, clock=clock, wait=wait,
                               poll=poll, call_timeout=call_timeout,
                               unreadable=(regdoc.RegistryError,))
    if got is None:
        raise NotApplied(
            f"intent {action} for {describe(card)} written to etcd, but the registry did "
            f"not reflect it within {wait:g} s (is a leader running?); it stays pending "
            "and the leader applies it when it can")
    return got


async def until_consumed(store: Store, key: str, then: Callable[[], Awaitable[T]], *,
                         clock: Clock, wait: float, poll: float, call_timeout: float,
                         unreadable: tuple[type[Exception], ...] = ()) -> T | None:
    """The CLI's wait for the leader after it wrote a request at ``key`` (an intent, a window
    request): every ``poll`` s, at most ``wait`` s, until the key is gone (the leader deletes
    it in the transaction of its answer), then ``then()``; None after the bound. A read that
    fails (StoreError, or one of ``unreadable`` from ``then``) is waited through."""
    waited_through: tuple[type[Exception], ...] = (StoreError, *unreadable)
    deadline = clock.monotonic() + wait
    while True:
        try:
            if await store.get(key, timeout=call_timeout) is None:
                return await then()
        except waited_through:
            pass                # keep waiting within the bound
        if clock.monotonic() >= deadline:
            return None
        await asyncio.sleep(poll)
