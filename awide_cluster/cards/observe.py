"""One poll of one configured card: discovery plus every applicable probe, concurrently,
all within ``spec.probe_timeout``. This is what the daemon calls each poll for each card.

Probes per kind (their order in ``CardObservation.probes``):

- nvme: discovery (sysfs by serial), device (controller live, namespace shown), identity
  (namespace NGUID/UUID/EUI-64 == known), store, listener (if ``target``).
- dir:  discovery (label read), identity (label == known), writable, store, listener.

``observe_card`` never raises for a card's trouble: every failure is a probe with a reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

from awide_cluster.cards.directory import LabelError, discover_dir
from awide_cluster.cards.model import DISCOVERY, CardObservation, LocalCard, ProbeResult, summarize
from awide_cluster.cards.nvme import discover_nvme
from awide_cluster.cards.probes import (
    Clock,
    check_device,
    check_identity,
    probe_listener,
    probe_store,
    probe_writable,
)
from awide_cluster.cards.spec import CardSpec
from awide_cluster.cards.units import UnitStates
from awide_cluster.cards.worker import ProbeWorker, StillStuck, shared_worker
from awide_cluster.nvme.cli import NvmeCli
from awide_cluster.nvme.runner import CommandRunner
from awide_cluster.nvme.sysfs import Sysfs

log = logging.getLogger(__name__)


async def observe_card(spec: CardSpec, runner: CommandRunner, sysfs: Sysfs,
                  known_identity: str | None, clock: Clock, *,
                  nvme_program: str = "nvme", systemctl: str = "systemctl",
                  worker: ProbeWorker | None = None,
                  units: UnitStates | None = None) -> CardObservation:
    """Discover the card and run its probes concurrently, bounded by ``spec.probe_timeout``.

    ``known_identity``: the identity first seen for this card (None: nothing known yet, any
    readable identity passes and the caller should remember ``obs.card.identity``).
    ``clock``: monotonic seconds, used for ``ProbeResult.elapsed``.
    ``worker``: where the blocking probes run (``shared_worker()`` when None); the cards
    observed concurrently in one turn hand theirs over to it together.
    ``units``: where systemd store units are asked (``cards.units``); the cards observed
    concurrently in one turn ask with one ``systemctl``. None: each card asks alone.
    """
    bound = spec.probe_timeout
    work = worker if worker is not None else shared_worker()
    jobs = [_discover(spec, runner, sysfs, known_identity, clock, nvme_program, work)]
    if spec.store is not None:
        jobs.append(_one(probe_store(spec.store, runner, bound, clock, systemctl=systemctl,
                                     units=units)))
    if spec.target is not None:
        jobs.append(_one(probe_listener(spec.target, bound, clock)))
    if spec.kind == "dir":
        assert spec.path is not None
        jobs.append(_one(probe_writable(spec.path, bound, clock, worker=work)))
    results = await asyncio.gather(*jobs)
    card, discovery_probes = results[0]
    probes = [*discovery_probes]
    for _, more in results[1:]:
        probes.extend(more)
    obs = summarize(spec.name, card, probes)
    if not obs.healthy:
        log.debug("card %s unhealthy: %s", spec.name, obs.reason)
    return obs


async def _one(probe: Awaitable[ProbeResult]) -> tuple[None, list[ProbeResult]]:
    return None, [await probe]


async def _discover(spec: CardSpec, runner: CommandRunner, sysfs: Sysfs,
                    known_identity: str | None, clock: Clock, nvme_program: str,
                    worker: ProbeWorker) -> tuple[LocalCard | None, list[ProbeResult]]:
    bound = spec.probe_timeout
    start = clock()

    def found(ok: bool, reason: str) -> ProbeResult:
        return ProbeResult(DISCOVERY, ok, reason, max(0.0, clock() - start))

    try:
        async with asyncio.timeout(bound):
            if spec.kind == "dir":
                assert spec.path is not None
                try:
                    card = await worker.run(discover_dir, spec.name, spec.path, spec.target,
                                            bound=bound, key=f"label {spec.path}")
                except StillStuck as exc:
                    return None, [found(False, f"card not found: {exc}")]
                except LabelError as exc:
                    return None, [found(False, f"card not found: {exc}")]
                return card, [found(True, f"label of {card.serial} found in {spec.path}"),
                              check_identity(card, known_identity)]
            assert spec.serial is not None
            # nvme id-ns (only when sysfs shows no identity) gets most of the bound, so a
            # hung command is reported as such, not as a card that was not found
            cli = NvmeCli(runner, program=nvme_program, timeout=bound)
            d = await discover_nvme(spec.name, spec.serial, spec.nsid, spec.target, sysfs, cli,
                                    timeout=bound * 0.8)
            if d.card is None:
                return None, [found(False, d.reason)]
            return d.card, [
                found(True, d.reason),
                check_device(d.card, namespace_missing=d.namespace_missing,
                             controller=d.controller),
                check_identity(d.card, known_identity, d.identity_reason),
            ]
    except TimeoutError:
        return None, [found(False, f"card not found: discovery did not finish within {bound:g} s")]
    except Exception as exc:  # noqa: BLE001 - reported, never raised into the poll loop
        log.warning("card %s: discovery failed", spec.name, exc_info=True)
        return None, [found(False, f"card not found: discovery failed: "
                                   f"{type(exc).__name__}: {exc}")]
