"""The host report: this host's cards observed, turned into ``members/<host>``.

``CardObserver`` is what the daemon asks about its configured cards each turn;
``LocalObserver`` is the real one (``cards.observe`` with the runner and sysfs passed in), an
observer that looks at one card at a time goes through ``each_card``.
Tests pass their own observer or a runner with fake programs; nothing here is patched.
"""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Protocol

from awide_cluster.cards.model import DISCOVERY, CardObservation, ProbeResult, summarize
from awide_cluster.cards.spec import CardSpec
from awide_cluster.contract import untrusted as u
from awide_cluster.contract.registry import Registry, card_id
from awide_cluster.contract.report import (
    ELAPSED_MAX,
    ETCD_NOTE_MAX,
    HISTORY_NOTE_MAX,
    HISTORY_RESETS_MAX,
    PROBE_NOTE_MAX,
    HostReport,
    ProbeLine,
    ReportedCard,
    Role,
    encode,
)
from awide_cluster.daemon.clock import Clock
from awide_cluster.nvme.runner import CommandRunner
from awide_cluster.nvme.sysfs import Sysfs

Cards = tuple[tuple[CardSpec, str | None], ...]   # each card's spec, the identity first seen


class CardObserver(Protocol):
    async def observe_cards(self, cards: Cards) -> list[CardObservation]:
        """Every card's observation, in the order of ``cards``, each bounded by its
        ``probe_timeout`` and half a second more; a card's trouble is its observation's."""
        ...


class LocalObserver:
    """Discovery and probes of local cards (``awide_cluster.cards.observe``)."""

    def __init__(self, runner: CommandRunner, sysfs: Sysfs, clock: Clock, *,
                 nvme_program: str = "nvme") -> None:
        from awide_cluster.cards.units import UnitStates
        from awide_cluster.cards.worker import ProbeWorker
        self.runner, self.sysfs, self.clock = runner, sysfs, clock
        self.nvme_program = nvme_program
        self.worker = ProbeWorker()     # every card's blocking probes of a turn, one thread
        self.units = UnitStates(runner)  # every card's store unit of a turn, one systemctl

    async def observe_cards(self, cards: Cards) -> list[CardObservation]:
        """Every card in one round (``cards.observe.observe_cards``: one timer, no task per
        probe; each card bounded by its ``probe_timeout``, with the same net as
        ``each_card``'s)."""
        from awide_cluster.cards.observe import observe_cards
        return await observe_cards(cards, self.runner, self.sysfs, self.clock.monotonic,
                                   nvme_program=self.nvme_program, worker=self.worker,
                                   units=self.units)


async def observe_all(observer: CardObserver, specs: tuple[CardSpec, ...],
                      known: dict[str, str]) -> list[CardObservation]:
    """Every card observed (``observer.observe_cards``); ``known`` (name -> identity first
    seen) is updated."""
    results = await observer.observe_cards(tuple((s, known.get(s.name)) for s in specs))
    _learn(specs, results, known)
    return results


async def each_card(observe: Callable[[CardSpec, str | None], Awaitable[CardObservation]],
                    cards: Cards) -> list[CardObservation]:
    """``CardObserver.observe_cards`` for an observer that looks at one card at a time
    (``observe``): every card concurrently, each bounded (its probes are bounded by
    ``probe_timeout``; this is the net under them)."""

    async def one(spec: CardSpec, known: str | None) -> CardObservation:
        try:
            async with asyncio.timeout(spec.probe_timeout + 0.5):
                return await observe(spec, known)
        except TimeoutError:
            why = f"card not found: observation did not finish within {spec.probe_timeout:g} s"
        except Exception as e:  # noqa: BLE001 - one card's trouble never stops the report
            why = f"card not found: observation failed: {type(e).__name__}: {e}"
        return summarize(spec.name, None, [ProbeResult(DISCOVERY, False, why, 0.0)])

    return list(await asyncio.gather(*(one(spec, known) for spec, known in cards)))


def _learn(specs: tuple[CardSpec, ...], results: list[CardObservation],
           known: dict[str, str]) -> None:
    """The identities seen for the first time remembered in ``known``."""
    for spec, obs in zip(specs, results, strict=True):
        if obs.card is not None and obs.card.identity and spec.name not in known:
            known[spec.name] = obs.card.identity


# this host's cards' ids, asked every turn for the same few cards (a hash each): kept
_card_id = functools.lru_cache(maxsize=256)(card_id)


def local_card_id(host: str, obs: CardObservation, registry: Registry | None) -> str:
    """The id of this host's card as observed (what the leader derives from the report), else
    the registry's entry under this host and name (a card not found now), else "" (unknown)."""
    c = obs.card
    if c is not None and c.serial and c.identity:
        return _card_id(c.serial, c.model, c.identity)
    for entry in registry.cards if registry is not None else ():
        if entry.host == host and entry.name == obs.spec_name:
            return entry.id
    return ""


# Texts from probes, nvme-cli, sysfs and exception messages go through the contract's
# ``clean_text`` (control characters become spaces, cut at the readers' bound): the report
# never holds what the leader's decoder refuses.
_clean = u.clean_text


def _elapsed(seconds: float) -> float:
    if not math.isfinite(seconds):
        return 0.0
    return round(min(max(seconds, 0.0), ELAPSED_MAX), 4)


def to_reported(spec: CardSpec, obs: CardObservation) -> ReportedCard:
    c = obs.card
    probes = tuple(ProbeLine(_clean(p.probe, u.PROBE_NAME_MAX), p.ok,
                             _clean(p.reason, u.REASON_MAX), _elapsed(p.elapsed))
                   for p in obs.probes[:u.PROBES_MAX])
    path = str(spec.path) if spec.path is not None else None
    if c is None:
        return ReportedCard(
            name=spec.name, kind=spec.kind, found=False, serial="", model="", identity="",
            device="", controller_state="", healthy=False, reason=_clean(obs.reason, u.REASON_MAX),
            target=spec.target, path=path, probes=probes)
    return ReportedCard(
        name=spec.name, kind=spec.kind, found=True, serial=c.serial, model=c.model,
        identity=c.identity or "", device=_clean(c.device or "", u.PATH_MAX),
        controller_state=_clean(c.controller_state or "", u.CONTROLLER_STATE_MAX),
        healthy=obs.healthy, reason="" if obs.healthy else _clean(obs.reason, u.REASON_MAX),
        target=c.target if c.target is not None else spec.target, path=path, probes=probes)


# Steps ``fit`` takes when a report is too large: (card reason, probe reason) bounds in
# characters; None drops the probe lines (the card's own reason still says what failed).
_SHRINK: tuple[tuple[int, int | None], ...] = ((256, 64), (64, None))


def fit(report: HostReport, max_bytes: int = u.REPORT_LIMITS.max_bytes) -> HostReport:
    """The report cut down until its encoding is within ``max_bytes`` (what readers accept):
    reasons are shortened, then probe lines dropped. Names, identities, targets and paths are
    never touched; the config bounds them (64 cards, paths of at most 1024 bytes), so the last
    step always fits (64 cards of about 8 KiB each with every text escaped at its longest:
    tests/contract/test_untrusted.py builds that report)."""
    return fitted(report, max_bytes)[0]


def fitted(report: HostReport, max_bytes: int = u.REPORT_LIMITS.max_bytes
           ) -> tuple[HostReport, bytes]:
    """``fit`` and the encoding of the report it returns (encoded once: what is written)."""
    raw = encode(report)
    if len(raw) <= max_bytes:
        return report, raw
    smaller = report
    for reason_max, probe_max in _SHRINK:
        cards = tuple(replace(
            c, reason=_clean(c.reason, reason_max),
            probes=() if probe_max is None else tuple(
                replace(p, reason=_clean(p.reason, probe_max)) for p in c.probes))
            for c in report.cards)
        smaller = replace(report, cards=cards)
        raw = encode(smaller)
        if len(raw) <= max_bytes:
            break
    return smaller, raw


def build_report(*, host: str, role: Role, version: str, api: str, run: str, seq: int,
                 dev_cluster: bool, specs: tuple[CardSpec, ...],
                 observations: list[CardObservation], history_resets: int = 0,
                 history_note: str = "", probe_note: str = "", leader_note: str = "",
                 etcd_note: str = "") -> HostReport:
    return build_encoded(
        host=host, role=role, version=version, api=api, run=run, seq=seq,
        dev_cluster=dev_cluster, specs=specs, observations=observations,
        history_resets=history_resets, history_note=history_note, probe_note=probe_note,
        leader_note=leader_note, etcd_note=etcd_note)[0]


def build_encoded(*, host: str, role: Role, version: str, api: str, run: str, seq: int,
                  dev_cluster: bool, specs: tuple[CardSpec, ...],
                  observations: list[CardObservation], history_resets: int = 0,
                  history_note: str = "", probe_note: str = "", leader_note: str = "",
                  etcd_note: str = "") -> tuple[HostReport, bytes]:
    """``build_report`` and its encoding (``report.encode`` of it), encoded once."""
    return fitted(HostReport(
        host=host, role=role, version=_clean(version, u.VERSION_MAX),
        api=_clean(api, u.API_MAX), run=run, seq=seq, dev_cluster=dev_cluster,
        cards=tuple(to_reported(s, o) for s, o in zip(specs, observations, strict=True)),
        history_resets=min(history_resets, HISTORY_RESETS_MAX),
        history_note=_clean(history_note, HISTORY_NOTE_MAX) if history_resets else "",
        probe_note=_clean(probe_note, PROBE_NOTE_MAX),
        leader_note=_clean(leader_note, PROBE_NOTE_MAX),
        etcd_note=_clean(etcd_note, ETCD_NOTE_MAX)))
