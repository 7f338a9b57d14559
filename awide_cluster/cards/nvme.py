"""NVMe cards: found in sysfs by their configured serial; identity from the namespace.

The on-card identity is the namespace's NGUID (else UUID, else EUI-64) read from sysfs; when
sysfs has none of them, ``nvme id-ns`` is asked (bounded, through the runner).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from awide_cluster.cards.model import LocalCard
from awide_cluster.cards.worker import ProbeWorker, StillStuck
from awide_cluster.contract.target import InvalidTarget, NvmeTarget
from awide_cluster.nvme.cli import NvmeCli
from awide_cluster.nvme.errors import NvmeError
from awide_cluster.nvme.runner import RunnerError
from awide_cluster.nvme.sysfs import Controller, Namespace, Sysfs, with_serial


@dataclass(frozen=True, slots=True)
class NvmeDiscovery:
    card: LocalCard | None
    reason: str                  # "found …" or "card not found: …"
    controller: str | None = None
    namespace_missing: bool = False
    identity_reason: str = ""    # why card.identity is None, when it is


def choose(controllers: Sequence[Controller], nsid: int | None
           ) -> tuple[Controller, Namespace | None] | None:
    """Pure: among controllers with the card's serial, prefer one that shows the namespace,
    then a live one, then the lowest controller number."""
    if not controllers:
        return None

    def rank(c: Controller) -> tuple[bool, bool, int]:
        return (c.namespace(nsid) is None, c.state != "live", int(c.name[4:]))

    best = sorted(controllers, key=rank)[0]
    return best, best.namespace(nsid)


async def discover_nvme(name: str, serial: str, nsid: int | None, target: NvmeTarget | None,
                        sysfs: Sysfs, cli: NvmeCli, *, timeout: float,
                        worker: ProbeWorker) -> NvmeDiscovery:
    """Find the card by serial and read its identity. sysfs is read off the event loop on
    ``worker``, where the NVMe cards of one round share one read of the controllers (a read
    still queued or running is joined; one still stuck past its bound is a TimeoutError)."""
    try:
        every = await worker.run(sysfs.controllers, bound=timeout,
                                 key=f"sysfs {sysfs.class_dir}", expire=True, share=True)
    except StillStuck as exc:
        raise TimeoutError(str(exc)) from exc
    controllers = with_serial(every, serial)
    picked = choose(controllers, nsid)
    if picked is None:
        return NvmeDiscovery(None, f"card not found: no NVMe controller with serial {serial!r}")
    ctrl, ns = picked
    identity, why = None, ""
    if ns is None:
        why = f"controller {ctrl.name} shows no namespace" + (f" {nsid}" if nsid else "")
    else:
        identity = ns.identity
        if identity is None:
            try:
                identity = (await cli.id_ns(ns.device, timeout=timeout)).identity
                if identity is None:
                    why = f"namespace {ns.device} has no NGUID, UUID or EUI-64"
            except (NvmeError, RunnerError, InvalidTarget) as exc:
                why = f"nvme id-ns {ns.device}: {exc}"
    card = LocalCard(name=name, kind="nvme", serial=ctrl.serial, model=ctrl.model,
                     identity=identity, device=ns.device if ns else None,
                     controller_state=ctrl.state or None, target=target)
    where = f"{ns.device} on {ctrl.name}" if ns else ctrl.name
    return NvmeDiscovery(card, f"found {where} (serial {ctrl.serial})", controller=ctrl.name,
                         namespace_missing=ns is None, identity_reason=why)
