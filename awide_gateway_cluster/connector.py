"""Connecting cards and probing their paths: the I/O shell under ``cardpath``.

NVMe cards:
1. the registry's target is validated again (``NvmeTarget.parse``): registry values are
   untrusted, and only a validated target ever reaches ``nvme connect`` (argv as a list);
2. sysfs is searched for a controller of the card's serial *at the card's target* (transport,
   address, port, subsystem NQN): after a target restart the namespace comes back under a new
   device name, and is found again this way; a controller of that serial elsewhere is not
   this card's (a controller this gateway connected for the card at another target, which
   the registry no longer gives, is disconnected);
3. not found and the registry says ``in``: ``nvme connect`` (bounded, killed on timeout) with
   this host's NQN and, when configured, its DH-HMAC-CHAP secret (read from its file at each
   connect, never kept, never logged);
4. before a device is used (first time, or whenever its name changed) the controller must
   answer ``id-ctrl`` with the registry's serial and model, and the namespace must carry the
   registry's on-card identity (``nguid:``/``uuid:``/``eui64:``) when the registry has one;
   anything else is refused, loudly (error log, ``refused`` event, counter);
5. every poll: healthy when the controller is ``live`` and no I/O error was reported.

A card the registry has ``out`` or ``drained`` is not connected if it is not already; one that
is connected stays connected (it is only out of service). A card the gateway no longer uses
(forgotten, or never vouched for) is disconnected (``release``): the controllers this gateway
connected for it, else its subsystem's when no other card uses it.

Stray controllers (``sweep``, each probe round; docs/gateway.md): a controller this host holds
with this gateway's host NQN, to a subsystem NQN of the cluster's cards (of any registry the
gateway used in this run, or of the one its state file kept from the previous run), at no
target of a card it uses now, is disconnected (a forged or moved target, or a card forgotten
while the gateway was down). At most ``SWEEP_MAX`` a round; only a sysfs controller name
(``nvmeN``) reaches nvme-cli's argv.

Directory cards: the directory must exist and carry a label naming the card's serial (and
identity); a directory that holds another label (different storage mounted there) is refused.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from awide_cluster.cards.worker import ProbeWorker, StillStuck
from awide_cluster.contract.registry import CardEntry
from awide_cluster.contract.target import InvalidTarget, NvmeTarget, validate_traddr
from awide_cluster.nvme.cli import NvmeCli
from awide_cluster.nvme.dhchap import BadSecret, DhchapSecret, read_secret_file
from awide_cluster.nvme.errors import AlreadyConnected, NvmeError
from awide_cluster.nvme.runner import RunnerError
from awide_cluster.nvme.sysfs import Controller, Sysfs
from awide_gateway_cluster.cardpath import Probe
from awide_gateway_cluster.config import FabricTimeouts, GatewayConfig
from awide_gateway_cluster.view import CardPath

log = logging.getLogger("awide_gateway_cluster.connector")
T = TypeVar("T")
_IDENTITY_FORMS = ("nguid:", "uuid:", "eui64:")
SWEEP_MAX = 8           # stray controllers disconnected per probe round at most


def strays(ctrls: Sequence[Controller], *, hostnqn: str | None, subnqns: frozenset[str],
           cards: Sequence[CardEntry]) -> tuple[Controller, ...]:
    """The controllers to let go: connected with ``hostnqn`` (None: not known, nothing is
    taken for this gateway's), to one of the cluster's subsystem NQNs ``subnqns``, at the
    target of none of ``cards`` (the entries the gateway uses; a controller at a card's whole
    target is the card's probe's business, even with another serial). Pure."""
    if not hostnqn:
        return ()
    targets = []
    for card in cards:
        if card.kind == "nvme" and card.target is not None:
            try:
                targets.append(NvmeTarget.parse(card.target.to_dict()))
            except InvalidTarget:
                continue
    return tuple(c for c in ctrls if c.hostnqn == hostnqn and c.subsysnqn in subnqns
                 and not any(_at_target(c, t) for t in targets))


class Connector:
    def __init__(self, nvme: NvmeCli, sysfs: Sysfs, *, hostnqn: str | None = None,
                 dhchap_secret_file: Path | None = None,
                 dhchap_ctrl_secret_file: Path | None = None,
                 hostid: str | None = None,
                 command_timeout: float = 5.0, read_label: Callable[[Path], Any] | None = None,
                 sysfs_timeout: float = 1.0, worker: ProbeWorker | None = None,
                 timeouts: FabricTimeouts | None = None,
                 discovery: bool = False, discovery_port: int | None = None) -> None:
        self.nvme, self.sysfs = nvme, sysfs
        # every card's reads of one probe round go to the worker's thread together; by default
        # a worker of this gateway's own (a worker serves one event loop, and a host program
        # may run gateways on several, e.g. threaded ones)
        self.worker = worker if worker is not None else ProbeWorker(name="awide-gateway-probes")
        self._key = f"gw{id(self):x}"     # this connector's jobs, should a worker be shared
        self.hostnqn = hostnqn
        self.dhchap_secret_file = dhchap_secret_file
        self.dhchap_ctrl_secret_file = dhchap_ctrl_secret_file
        if dhchap_secret_file is not None and hostid is None:
            raise ValueError("a DH-HMAC-CHAP secret needs this host's hostid: the secrets "
                             "reach nvme-cli in a file only with it, never on its argv")
        self.hostid = hostid        # the secrets go in a file with it, never on argv
        self.command_timeout = command_timeout
        self.sysfs_timeout = sysfs_timeout
        self._read_label = read_label
        self.connected: dict[str, set[str]] = {}     # card id -> controllers connected for it

        self.timeouts = timeouts
        # ask the discovery controller at a card's address (on this port, None: the card's)
        # before a connect (docs/gateway.md, "NVMe-oF discovery")
        self.discovery, self.discovery_port = discovery, discovery_port

    async def _off_loop(self, fn: Callable[[], T], card: CardEntry, what: str) -> T:
        """A sysfs/file read off the event loop, on the probe worker, bounded (the worker
        fails it at ``sysfs_timeout``: one timer for every card's reads of a round, none per
        read). A read of the same card and kind still stuck from an earlier probe is a
        timeout too (nothing queues behind it)."""
        try:
            return await self.worker.run(fn, bound=self.sysfs_timeout,
                                         key=f"{self._key}:{card.id}:{what}", expire=True)
        except StillStuck as e:
            raise TimeoutError(str(e)) from e

    async def _controllers(self) -> tuple[Controller, ...]:
        """Every NVMe controller sysfs shows, read off the event loop on the probe worker and
        bounded like any read (``_off_loop``). One read for the cards probed together: a
        read still queued or running is joined (the cards of a probe round and the round's
        stray sweep share one; before, each card read the whole tree)."""
        try:
            return await self.worker.run(self.sysfs.controllers, bound=self.sysfs_timeout,
                                         key=f"{self._key}:sysfs", expire=True, share=True)
        except StillStuck as e:
            raise TimeoutError(str(e)) from e

    async def probe(self, card: CardEntry, local: CardPath, io_errors: int = 0) -> Probe:
        try:
            if card.kind == "dir":
                return await self._probe_dir(card, local, io_errors)
            return await self._probe_nvme(card, local, io_errors)
        except TimeoutError:
            return Probe(device=local.device, verified=local.verified,
                         note="probe timed out (sysfs or file system did not answer)")

    # ------------------------------------------------------------------ nvme

    async def _probe_nvme(self, card: CardEntry, local: CardPath, io_errors: int) -> Probe:
        if card.target is None:
            return Probe(refused="an nvme card without a target", hostile=True)
        try:
            target = NvmeTarget.parse(card.target.to_dict())
        except InvalidTarget as e:
            log.error("card %s: hostile target refused, nothing run: %s", card.id, e)
            return Probe(refused=f"target refused: {e}", hostile=True)
        ctrls = await self._controllers()
        await self._let_go_elsewhere(card, target, ctrls)
        mine = [c for c in ctrls if c.serial == card.serial and _at_target(c, target)]
        if not mine:
            wrong = [c for c in ctrls if _at_target(c, target) and c.serial]
            if wrong:
                return _wrong_card(card, target, wrong[0].serial, wrong[0].model)
            if card.state != "in":
                return Probe(note=f"not connected (registry: {card.state})")
            if self.discovery:
                unpublished = await self._unpublished(
                    card, target, self.discovery_port or target.trsvcid)
                if unpublished is not None:
                    return unpublished
            connected = await self._connect(card, target)
            if isinstance(connected, Probe):
                return connected
            mine = [connected]
        ctrl = sorted(mine, key=lambda c: (c.state != "live", _num(c.name)))[0]
        if ctrl.model != card.model:
            return _wrong_card(card, target, ctrl.serial, ctrl.model)
        ns = ctrl.namespace()
        if ns is None:
            return Probe(note=f"controller {ctrl.name} shows no namespace",
                         good=False, reason=f"controller {ctrl.name} has no namespace")
        device = f"/dev/{ns.device}"
        if not (local.verified and local.device == device):
            checked = await self._verify(card, target, ctrl, ns)
            if checked is not None:
                return checked
            if local.device and local.device != device:
                log.warning("card %s: namespace now %s (was %s), identity checked",
                            card.id, device, local.device)
        problems = []
        if ctrl.state != "live":
            problems.append(f"controller {ctrl.name} state {ctrl.state or 'unknown'}")
        if io_errors:
            problems.append(f"{io_errors} I/O error(s) reported")
        return Probe(device=device, verified=True, good=not problems, reason="; ".join(problems))

    async def _connect(self, card: CardEntry, target: NvmeTarget) -> Controller | Probe:
        secrets: list[DhchapSecret | None] = []
        for secret_file in (self.dhchap_secret_file, self.dhchap_ctrl_secret_file):
            if secret_file is None:
                secrets.append(None)
                continue
            try:
                secrets.append(await self._off_loop(
                    functools.partial(read_secret_file, secret_file), card, "secret"))
            except BadSecret as e:
                log.warning("card %s: connect %s not tried: %s", card.id, target, e)
                return Probe(note=f"connect not tried: {e}")
        secret, ctrl_secret = secrets
        try:
            t = self.timeouts
            name = await self.nvme.connect(
                target, self.hostnqn, dhchap_secret=secret, dhchap_ctrl_secret=ctrl_secret,
                hostid=self.hostid, timeout=self.command_timeout,
                ctrl_loss_tmo=t.ctrl_loss_tmo if t else None,
                reconnect_delay=t.reconnect_delay if t else None,
                keep_alive_tmo=t.keep_alive_tmo if t else None)
        except AlreadyConnected:
            # a read of its own, begun after the connect (not one joined, begun before it)
            ctrls = await self._off_loop(self.sysfs.controllers, card, "sysfs")
            found = [c for c in ctrls if _at_target(c, target)]
            if not found:
                return Probe(note=f"nvme connect {target}: already connected, but not in sysfs")
            ctrl = found[0]
        except (NvmeError, RunnerError, InvalidTarget, ValueError) as e:
            log.warning("card %s: connect %s failed: %s", card.id, target, e)
            return Probe(note=f"connect failed: {e}")
        else:
            shown = await self._off_loop(lambda: self.sysfs.controller(name), card, "sysfs")
            if shown is None:
                return Probe(note=f"nvme connect gave {name}, which sysfs does not show")
            ctrl = shown
            await self._fast_io_fail(card, name)
        self.connected.setdefault(card.id, set()).add(ctrl.name)
        if ctrl.serial != card.serial:
            return _wrong_card(card, target, ctrl.serial, ctrl.model)
        return ctrl

    async def _unpublished(self, card: CardEntry, target: NvmeTarget,
                           port: int) -> Probe | None:
        """None when the discovery controller at the card's (vouched) address publishes its
        target as is; else why the card is not connected (its log is only compared with the
        target: no address or port is ever taken from it)."""
        where = f"{target.transport}://{target.traddr}:{port}"
        try:
            found = await self.nvme.discover(target.transport, target.traddr, port,
                                             self.hostnqn, timeout=self.command_timeout)
        except (NvmeError, RunnerError, InvalidTarget) as e:
            log.warning("card %s: not connected: discovery at %s failed: %s", card.id, where, e)
            return Probe(note=f"not connected: discovery at {where} failed: {e}")
        if found.publishes(target):
            return None
        log.warning("card %s: not connected: the discovery controller at %s does not publish "
                    "%s (%d entries, %d skipped)", card.id, where, target,
                    len(found.targets), found.skipped)
        return Probe(note=f"not connected: {target} not published by the discovery "
                          f"controller at {where}")

    async def _let_go_elsewhere(self, card: CardEntry, target: NvmeTarget,
                                ctrls: Sequence[Controller]) -> None:
        """Disconnect the controllers this gateway connected for ``card`` that are not at its
        target now (it moved, or the target it was connected to is no longer given)."""
        names = self.connected.get(card.id)
        if not names:
            return
        present = {c.name: c for c in ctrls}
        for name in sorted(names):
            ctrl = present.get(name)
            if ctrl is None:
                names.discard(name)         # gone (disconnected, or the target went away)
            elif not _at_target(ctrl, target):
                await self._disconnect(card, name, f"not at the card's target {target}")

    async def _disconnect(self, card: CardEntry, name: str, why: str) -> bool:
        try:
            await self.nvme.disconnect_device(name, timeout=self.command_timeout)
        except (NvmeError, RunnerError, InvalidTarget) as e:
            log.warning("card %s: disconnect %s (%s) failed: %s", card.id, name, why, e)
            return False
        log.warning("card %s: disconnected %s: %s", card.id, name, why)
        self.connected.get(card.id, set()).discard(name)
        return True

    async def sweep(self, cards: Sequence[CardEntry], subnqns: frozenset[str]) -> int:
        """Disconnect the stray controllers (``strays``), at most ``SWEEP_MAX``, one log line
        each; how many were disconnected. Bounded (one sysfs read, each disconnect)."""
        if not self.hostnqn or not subnqns:
            return 0
        try:
            ctrls = await self._controllers()
        except TimeoutError:
            return 0
        found = strays(ctrls, hostnqn=self.hostnqn, subnqns=subnqns, cards=cards)
        done = 0
        for ctrl in found[:SWEEP_MAX]:
            try:
                await self.nvme.disconnect_device(ctrl.name, timeout=self.command_timeout)
            except (NvmeError, RunnerError, InvalidTarget) as e:
                log.warning("stray controller %s (%r %r, serial %r): disconnect failed: %s",
                            ctrl.name, ctrl.address.raw, ctrl.subsysnqn, ctrl.serial, e)
                continue
            log.warning("stray controller %s disconnected: %r %r (serial %r) is at no target "
                        "of a card this gateway uses", ctrl.name, ctrl.address.raw,
                        ctrl.subsysnqn, ctrl.serial)
            for names in self.connected.values():
                names.discard(ctrl.name)
            done += 1
        return done

    async def _fast_io_fail(self, card: CardEntry, name: str) -> None:
        """Set the new controller's fast_io_fail_tmo (sysfs; nvme-cli 2.3 cannot). A failure
        is logged and the card used anyway: I/O then waits for ctrl_loss_tmo at worst."""
        t = self.timeouts
        if t is None:
            return
        seconds = t.fast_io_fail_tmo
        try:
            await self._off_loop(lambda: self.sysfs.set_fast_io_fail_tmo(name, seconds), card,
                                 "fast_io_fail")
        except (OSError, ValueError, TimeoutError) as e:
            log.warning("card %s: fast_io_fail_tmo of %s not set (I/O to a lost target waits "
                        "up to ctrl_loss_tmo): %s", card.id, name, e)

    async def _verify(self, card: CardEntry, target: NvmeTarget, ctrl: Controller,
                      ns: Any) -> Probe | None:
        """None when the controller answers as the card (serial, model, identity)."""
        try:
            ident = await self.nvme.id_ctrl(ctrl.name, timeout=self.command_timeout)
        except (NvmeError, RunnerError, InvalidTarget) as e:
            return Probe(note=f"identity check failed: {e}")
        if ident.serial != card.serial or ident.model != card.model:
            return _wrong_card(card, target, ident.serial, ident.model)
        if card.identity.startswith(_IDENTITY_FORMS):
            found = ns.identity
            if found is None:
                try:
                    found = (await self.nvme.id_ns(ns.device,
                                                   timeout=self.command_timeout)).identity
                except (NvmeError, RunnerError, InvalidTarget) as e:
                    return Probe(note=f"on-card identity check failed: {e}")
            if found != card.identity:
                msg = (f"namespace {ns.device} carries identity {found or 'none'}, registry "
                       f"says {card.identity}: not the same card")
                log.error("card %s REFUSED: %s", card.id, msg)
                return Probe(refused=msg)
        return None

    async def release(self, card: CardEntry, *, shared: bool = False) -> None:
        """Disconnect a card the gateway no longer uses (best effort, bounded): the
        controllers it connected for it; else, unless another card uses its subsystem
        (``shared``), every controller of its subsystem."""
        if card.kind != "nvme" or card.target is None:
            return
        names = self.connected.pop(card.id, set())
        if names:
            for name in sorted(names):
                await self._disconnect(card, name, "the card is no longer used")
            return
        if shared:
            return
        try:
            target = NvmeTarget.parse(card.target.to_dict())
            n = await self.nvme.disconnect(target.subnqn, timeout=self.command_timeout)
            log.info("card %s forgotten by the registry: disconnected %d controller(s)",
                     card.id, n)
        except (NvmeError, RunnerError, InvalidTarget) as e:
            log.warning("card %s forgotten by the registry: disconnect failed: %s", card.id, e)

    # ------------------------------------------------------------------ directories

    async def _probe_dir(self, card: CardEntry, local: CardPath, io_errors: int) -> Probe:
        if not card.path:
            return Probe(refused="a directory card without a path")
        path = _dir_path(card.path)
        read_label = self._read_label
        if read_label is None:
            return Probe(note="directory cards need a label reader")
        try:
            label = await self._off_loop(lambda: read_label(path), card, "label")
        except TimeoutError:
            raise
        except Exception as e:  # noqa: BLE001 - any unreadable label is "not found"
            return Probe(note=f"directory {path}: no readable label: {e}",
                         good=False, reason=f"label unreadable: {e}")
        if label is None:
            return Probe(note=f"directory {path} has no label (not mounted?)",
                         good=False, reason="no label")
        serial = str(getattr(label, "serial", ""))
        model = str(getattr(label, "model", ""))
        identity = str(getattr(label, "identity", ""))
        if (serial, model) != (card.serial, card.model) or (
                card.identity and identity != card.identity):
            msg = (f"directory {path} is labelled serial {serial!r} model {model!r} identity "
                   f"{identity!r}, registry says serial {card.serial!r} model {card.model!r} "
                   f"identity {card.identity!r}: other storage in its place")
            log.error("card %s REFUSED: %s", card.id, msg)
            return Probe(refused=msg)
        problems = f"{io_errors} I/O error(s) reported" if io_errors else ""
        return Probe(device=str(path), verified=True, good=not problems, reason=problems)


@functools.lru_cache(maxsize=1024)
def _dir_path(path: str) -> Path:
    """A directory card's path, parsed once (not at every probe, on the event loop)."""
    return Path(path)


def _num(name: str) -> int:
    try:
        return int(name[4:])
    except ValueError:
        return 1 << 30


def _at_target(c: Controller, t: NvmeTarget) -> bool:
    if c.transport != t.transport or c.subsysnqn != t.subnqn:
        return False
    try:
        traddr = validate_traddr(c.address.traddr or "")
    except InvalidTarget:
        return False
    return traddr == t.traddr and c.address.trsvcid == str(t.trsvcid)


def _wrong_card(card: CardEntry, target: NvmeTarget, serial: str, model: str) -> Probe:
    msg = (f"target {target} answers with serial {serial!r} model {model!r}, registry says "
           f"serial {card.serial!r} model {card.model!r}: not this card")
    log.error("card %s REFUSED: %s", card.id, msg)
    return Probe(refused=msg)


def for_config(config: GatewayConfig, *, nvme: NvmeCli | None, sysfs: Sysfs | None,
               read_label: Callable[..., Any] | None,
               worker: ProbeWorker | None) -> Connector:
    """The gateway's connector: ``nvme``, ``sysfs`` and ``read_label`` as given (tests and
    embedding), else the host's own (nvme-cli, ``/sys``, the directory cards' label reader)."""
    if nvme is None:
        from awide_cluster.nvme.runner import Runner
        nvme = NvmeCli(Runner(), program=config.nvme.program,
                       timeout=config.nvme.command_timeout)
    if sysfs is None:
        sysfs = Sysfs(config.nvme.sysfs_root)
    if read_label is None:
        read_label = _default_label_reader()
    return Connector(nvme, sysfs, hostnqn=config.nvme.hostnqn,
                     dhchap_secret_file=config.nvme.dhchap_secret_file,
                     dhchap_ctrl_secret_file=config.nvme.dhchap_ctrl_secret_file,
                     hostid=config.nvme.hostid,
                     command_timeout=config.nvme.command_timeout, read_label=read_label,
                     worker=worker, timeouts=config.nvme.fabric_timeouts,
                     discovery=config.nvme.discovery,
                     discovery_port=config.nvme.discovery_port)


def _default_label_reader() -> Callable[..., Any] | None:
    try:
        from awide_cluster.cards.directory import read_label
    except ImportError:
        return None
    return read_label
