"""Injecting one scheduled fault into the campaign cluster, and healing it.

``inject(ctx, fault) -> FaultRecord``: resolves the fault's target on the running cluster
(the leader as etcd says now, or the ``pick``-th candidate of a sorted list), makes the fault,
holds it, heals it, and records when each happened. A fault that cannot be made right now (no
leader to target) is recorded as skipped with the reason. Ground-truth changes (a label swap)
go to the history as ``TruthChange`` records, the runner's own writes into etcd (poison, a
forged registry, a deleted key) as ``RunnerWrite`` records with their revision. Everything is
bounded.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from awide_cluster.contract import keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.store.errors import StoreError
from awide_harness.cluster import EmbeddedCluster, EmbeddedClusterError
from awide_harness.procs import REPO_ROOT
from awide_harness.waits import WaitTimeout, wait_until_sync
from tests.faults import poison as hostile
from tests.faults.burst import BurstWorker
from tests.faults.campaign_record import FaultRecord, History, RunnerWrite, TruthChange
from tests.faults.schedule import Fault

WATCHED = ("registry", "leader")     # the keys the recorder follows (history.KeyEvent)


@dataclass
class Ctx:
    cluster: EmbeddedCluster
    history: History
    say: Callable[[str], None]          # one line of the event log (source "runner")
    poll: float                         # the daemons' poll interval
    burst: BurstWorker | None = None    # started at the first read burst

    def close(self) -> None:
        if self.burst is not None:
            self.burst.close()
            self.burst = None


def _pick(items: list[str], pick: int) -> str:
    return sorted(items)[pick % len(items)]


def _leader(ctx: Ctx) -> str | None:
    """The host holding the leader key now (waiting up to 5 s for one), or None."""
    host = ctx.cluster.leader_or_none(1.0)
    if host is None:
        found = ctx.cluster.wait_leader(5.0)
        host = found[0] if found is not None else None
    return host


def inject(ctx: Ctx, f: Fault) -> FaultRecord:
    fn = _KINDS[f.kind]
    rec = FaultRecord(index=f.index, kind=f.kind, target="", hold=f.hold,
                      t_inject=time.monotonic())
    fn(ctx, f, rec)
    if rec.skipped:
        ctx.say(f"fault #{f.index} {f.kind} skipped: {rec.skipped}")
    return rec


def _hold(f: Fault) -> None:
    time.sleep(f.hold)      # not a wait: the fault lasts this long on purpose


# ------------------------------------------------------------------ daemons

def _daemon_kill(ctx: Ctx, f: Fault, rec: FaultRecord, *, leader: bool) -> None:
    c = ctx.cluster
    host = _target_daemon(ctx, f, rec, leader)
    if host is None:
        return
    try:
        rec.t_inject = c.kill_daemon(host)
    except EmbeddedClusterError as e:      # it died on its own: the runner restarts it
        rec.skipped = str(e)
        return
    ctx.say(f"#{f.index} SIGKILL daemon {host}{' (leader)' if leader else ''}")
    _hold(f)
    t_spawn = c.restart_daemon(host)
    # healed once the new process is up (its API answers): how long a Python process takes
    # to start on a loaded machine is not the cluster's to bound
    try:
        wait_until_sync(lambda: c.daemon_status(host, 0.3), t_spawn + 60.0 - time.monotonic(),
                        f"daemon {host}'s API answers", poll=0.05)
    except WaitTimeout:
        pass
    rec.t_heal = time.monotonic()
    rec.detail += f"; new process up {rec.t_heal - t_spawn:.2f} s after its start"
    ctx.say(f"#{f.index} daemon {host} started again (up after {rec.t_heal - t_spawn:.2f} s)")


def _daemon_stop(ctx: Ctx, f: Fault, rec: FaultRecord, *, leader: bool) -> None:
    c = ctx.cluster
    host = _target_daemon(ctx, f, rec, leader)
    if host is None:
        return
    try:
        rec.t_inject = c.daemon_signal(host, signal.SIGSTOP)
    except EmbeddedClusterError as e:      # it died on its own: the runner restarts it
        rec.skipped = str(e)
        return
    ctx.say(f"#{f.index} SIGSTOP daemon {host}{' (leader)' if leader else ''}")
    _hold(f)
    try:
        rec.t_heal = c.daemon_signal(host, signal.SIGCONT)
    except EmbeddedClusterError:           # died while stopped: the runner restarts it
        rec.t_heal = time.monotonic()
    ctx.say(f"#{f.index} SIGCONT daemon {host}")


def _target_daemon(ctx: Ctx, f: Fault, rec: FaultRecord, leader: bool) -> str | None:
    lead = _leader(ctx)
    if lead is None:
        rec.skipped = "no daemon holds the leader key"
        return None
    host = lead if leader else _pick([h for h in ctx.cluster.hosts if h != lead], f.pick)
    rec.target = host
    rec.detail = f"leader was {lead}"
    return host


# ------------------------------------------------------------------ etcd

def _etcd_stop(ctx: Ctx, f: Fault, rec: FaultRecord) -> None:
    c = ctx.cluster
    i = f.pick % c.etcd.size
    rec.target = f"etcd{i} ({c.hosts[i]})"
    rec.t_inject = time.monotonic()
    c.etcd.freeze(i)
    ctx.say(f"#{f.index} SIGSTOP etcd member {i}")
    _hold(f)
    c.etcd.thaw(i)
    rec.t_heal = time.monotonic()
    ctx.say(f"#{f.index} SIGCONT etcd member {i}")


def _quorum_loss(ctx: Ctx, f: Fault, rec: FaultRecord) -> None:
    c = ctx.cluster
    keep = f.pick % c.etcd.size
    gone = [i for i in range(c.etcd.size) if i != keep][:2]
    rec.target = f"etcd{gone[0]}+etcd{gone[1]} (quorum lost, etcd{keep} left)"
    rec.t_inject = time.monotonic()
    for i in gone:
        c.etcd.kill(i)
    ctx.say(f"#{f.index} SIGKILL etcd members {gone}: quorum lost")
    _hold(f)
    for i in gone:
        c.etcd.restart(i, wait=False)
    rec.t_heal = time.monotonic()
    ctx.say(f"#{f.index} etcd members {gone} restarted")
    try:
        c.etcd.wait_healthy(timeout=20.0)
        rec.t_restored = time.monotonic()
        ctx.say(f"#{f.index} etcd quorum back after {rec.t_restored - rec.t_heal:.2f} s")
    except Exception as e:  # noqa: BLE001 - recorded: agreement will fail and say so
        rec.detail = f"etcd not healthy within 20 s: {e}"
        ctx.say(f"#{f.index} etcd NOT healthy again: {e}")


def _refuse_writes(ctx: Ctx, f: Fault, rec: FaultRecord) -> None:
    """etcd refuses every write (its NOSPACE alarm, as a full backend quota leaves it), reads
    still answered; disarmed after the hold. No card fails meanwhile: none may go out."""
    c = ctx.cluster
    i = f.pick % c.etcd.size
    rec.target = f"etcd (NOSPACE raised as etcd{i})"
    rec.t_inject = c.raise_nospace(i)
    ctx.say(f"#{f.index} etcd NOSPACE alarm raised (as etcd{i}): every write refused")
    _hold(f)
    rec.t_heal = c.disarm_alarms()
    ctx.say(f"#{f.index} etcd alarms disarmed: writes accepted again")


# ------------------------------------------------------------------ network

def _partition(ctx: Ctx, f: Fault, rec: FaultRecord) -> None:
    c = ctx.cluster
    host = _leader(ctx)
    if host is None:
        rec.skipped = "no daemon holds the leader key"
        return
    rec.target = host
    rec.t_inject, how = c.partition(host)
    rec.detail = how
    ctx.say(f"#{f.index} partition of leader host {host}: {how}")
    _hold(f)
    rec.t_heal = c.heal_partition(host)
    ctx.say(f"#{f.index} partition of {host} healed")


# ------------------------------------------------------------------ cards

def _store_death(ctx: Ctx, f: Fault, rec: FaultRecord) -> None:
    c = ctx.cluster
    key = _pick(list(c.cards), f.pick)
    rec.target = key
    rec.cards = (c.card_id(key),)
    rec.t_inject = c.card_store_kill(key)
    ctx.say(f"#{f.index} SIGKILL store service of {key}")
    _hold(f)
    rec.t_heal = c.card_store_start(key)
    ctx.say(f"#{f.index} store service of {key} started again")


def _card_swap(ctx: Ctx, f: Fault, rec: FaultRecord) -> None:
    c = ctx.cluster
    key = _pick([k for k in c.cards if c.card(k).kind == "dir"], f.pick)
    card = c.card(key)
    rec.target = key
    rec.cards = (card.id,)
    t = rec.t_inject = time.monotonic()
    ctx.history.add(TruthChange(t, card.id, False, f"{key}: label swapped out"))
    ctx.history.add(TruthChange(t, card.alt_id, True, f"{key}~alt in its place"))
    c.swap_label(key)
    ctx.say(f"#{f.index} label of {key} swapped for another card's ({card.alt_serial})")
    _hold(f)
    # both truth changes are stamped just before the write: a gateway that checks the label
    # right after the write must not look early
    t2 = time.monotonic()
    ctx.history.add(TruthChange(t2, card.alt_id, False, f"{key}~alt removed"))
    ctx.history.add(TruthChange(t2, card.id, True, f"{key}: own label back"))
    rec.t_heal = c.restore_label(key)
    ctx.say(f"#{f.index} label of {key} restored")


def _device_rename(ctx: Ctx, f: Fault, rec: FaultRecord) -> None:
    c = ctx.cluster
    nvme = [k for k in c.cards if c.card(k).kind == "nvme"]
    if not nvme:
        rec.skipped = "no NVMe card in this layout"
        return
    key = _pick(nvme, f.pick)
    card = c.card(key)
    rec.target = key
    before = {}
    for gid in c.gateway_ids:
        tb = ctx.history.latest_table(gid)
        s = tb.slot_of(card.id) if tb else None
        if s is not None and s.device:
            before[gid] = s.device
    rec.t_inject = time.monotonic()
    gone = c.vanish_device(key)
    rec.t_heal = time.monotonic()
    rec.renamed = tuple((gid, card.id, dev) for gid, dev in sorted(before.items()))
    rec.detail = ", ".join(f"{g}: {n}" for g, n in gone)
    ctx.say(f"#{f.index} controller of {key} vanished on the gateways' hosts ({rec.detail}); "
            "they must reconnect it under a new name")


def _card_flap(ctx: Ctx, f: Fault, rec: FaultRecord) -> None:
    """The card itself fails and returns, each phase about one poll (dead 0.9 poll, alive 1.1),
    never for the sick_polls in a row the hysteresis needs. Instant toggles (a directory
    renamed away and back, a controller going ``connecting``), so the phases are what they
    say — a store process restart would take longer than a poll on a loaded machine."""
    c = ctx.cluster
    key = _pick(list(c.cards), f.pick)
    rec.target = key
    rec.cards = (c.card_id(key),)
    rec.t_inject = time.monotonic()
    ctx.say(f"#{f.index} {key} flaps {f.flaps} times (dead ~0.9 poll, alive ~1.1 poll)")
    try:
        for _ in range(f.flaps):
            c.card_glitch(key, present=False)
            time.sleep(ctx.poll * 0.9)      # not a wait: the flap's dead phase
            c.card_glitch(key, present=True)
            time.sleep(ctx.poll * 1.1)      # not a wait: the flap's alive phase
    finally:
        c.card_glitch(key, present=True)
    rec.t_heal = time.monotonic()
    rec.hold = rec.t_heal - rec.t_inject
    ctx.say(f"#{f.index} {key} stopped flapping")


def _read_burst(ctx: Ctx, f: Fault, rec: FaultRecord) -> None:
    rec.target = f"{f.readers} followers"
    rec.t_inject = time.monotonic()
    ctx.say(f"#{f.index} registry read burst: {f.readers} followers for {f.hold:.2f} s")
    rec.detail = _burst(ctx).run(f.readers, f.hold)
    rec.t_heal = time.monotonic()
    ctx.say(f"#{f.index} burst done: {rec.detail}")


def _burst(ctx: Ctx) -> BurstWorker:
    """The burst worker (``burst.BurstWorker``), started through the cluster's launcher in
    the first gateway host's namespace (when hosts are namespaces)."""
    c = ctx.cluster
    if ctx.burst is None:
        ctx.burst = BurstWorker(
            c.launcher, c.work_dir / "burst.fifo",
            ["--endpoints", ",".join(c.etcd.endpoints), "--cluster", c.spec.cluster],
            netns=c.netns(c.spec.gateway_hosts[0]), env={"PYTHONPATH": str(REPO_ROOT)})
    return ctx.burst


# ------------------------------------------------------------------ written by hand

def _by_hand(ctx: Ctx, f: Fault, key: str, value: bytes | None, note: str,
             forged: tuple[str, ...] = ()) -> int:
    """Put ``value`` at ``key`` (None: delete it) by hand and record it as the runner's
    write (``RunnerWrite``). Its revision; 0 when it was not applied (nothing to delete)."""
    c = ctx.cluster
    t = time.monotonic()
    kind = "put" if value is not None else "delete"
    try:
        revision = c.write_by_hand(key, value)
    except (StoreError, TimeoutError) as e:
        revision = _found_again(ctx, key, value, t)
        note += f" (etcd's answer was lost: {type(e).__name__}; "
        note += f"found at revision {revision})" if revision else "not applied)"
    shown = key.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")
    if revision:
        ctx.history.add(RunnerWrite(t, revision, key, kind, f.index, note, forged))
        ctx.say(f"#{f.index} by hand: {kind} {shown} at revision {revision}: {note}")
    else:
        ctx.say(f"#{f.index} by hand: {kind} {shown} not applied: {note}")
    return revision


def _found_again(ctx: Ctx, key: str, value: bytes | None, t: float, bound: float = 5.0) -> int:
    """The revision of a write whose answer was lost, if it happened: for the watched keys
    the recorder's history has every event (waited for up to ``bound``); otherwise the key
    is read again."""
    def seen() -> int:
        for e in ctx.history.key_events_since(key, t):
            if (e.kind == "delete") if value is None else (e.kind == "put" and e.value == value):
                return e.revision
        return 0

    if key in WATCHED:
        try:
            return wait_until_sync(seen, bound, f"the recorder sees the write of {key}",
                                   poll=0.05)
        except WaitTimeout:
            return 0
    try:
        kv = ctx.cluster.read_key(key, 2.0)
    except (StoreError, TimeoutError):
        return 0
    if value is None:
        return 0 if kv is not None else -1     # gone: a revision the checkers never look at
    return kv.mod_revision if kv is not None and kv.value == value else 0


def _registry_now(ctx: Ctx) -> regdoc.Registry | None:
    try:
        kv = ctx.cluster.read_key(keys.REGISTRY, 2.0)
        return regdoc.decode(kv.value) if kv is not None else None
    except (StoreError, TimeoutError, regdoc.RegistryError):
        return None


def _clean_up(ctx: Ctx, f: Fault, key: str, why: str) -> None:
    """Delete a key that is not the cluster's own (the heal of a poison fault)."""
    _by_hand(ctx, f, key, None, f"clean-up: {why}")


def _poison_key(ctx: Ctx, f: Fault, rec: FaultRecord) -> None:
    c = ctx.cluster
    reg = _registry_now(ctx)
    p = hostile.poison(f.pick, cluster=c.spec.cluster, hosts=c.hosts,
                       leader=c.leader_or_none(1.0), generation=reg.generation if reg else 0,
                       card_ids=tuple(c.card_id(k) for k in c.cards))
    rec.target = p.note
    rec.t_inject = time.monotonic()
    if not _by_hand(ctx, f, p.key, p.value, p.note, p.forged_cards):
        rec.skipped = "the poison was not written (etcd did not confirm it)"
        return
    _hold(f)
    if not p.own:
        _clean_up(ctx, f, p.key, p.note)
    rec.t_heal = time.monotonic()
    rec.detail = "left to the cluster to repair" if p.own else "deleted by the runner"
    ctx.say(f"#{f.index} poison {'left to the cluster' if p.own else 'deleted'}")


def _registry_deleted(ctx: Ctx, f: Fault, rec: FaultRecord) -> None:
    rec.target = keys.REGISTRY
    rec.t_inject = time.monotonic()
    if not _by_hand(ctx, f, keys.REGISTRY, None, "registry deleted"):
        rec.skipped = "no registry to delete"
        return
    _hold(f)
    rec.t_heal = time.monotonic()


def _registry_forged(ctx: Ctx, f: Fault, rec: FaultRecord) -> None:
    c = ctx.cluster
    reg = _registry_now(ctx)
    if reg is None:
        rec.skipped = "no registry to build a forged one on"
        return
    value, forged = hostile.forged_registry(reg, f.index, c.hosts, f.pick)
    note = (f"forged registry: generation {reg.generation + hostile.AHEAD} "
            f"(etcd's {reg.generation}), the real cards moved behind forged cards {list(forged)}")
    rec.target = f"registry generation {reg.generation + hostile.AHEAD}"
    rec.t_inject = time.monotonic()
    if not _by_hand(ctx, f, keys.REGISTRY, value, note, forged):
        rec.skipped = "the forged registry was not written (etcd did not confirm it)"
        return
    _hold(f)
    rec.t_heal = time.monotonic()


def _report_unknown_host(ctx: Ctx, f: Fault, rec: FaultRecord) -> None:
    p = hostile.stranger_report(f.pick, f.index, _registry_now(ctx))
    rec.target = p.key
    rec.t_inject = time.monotonic()
    if not _by_hand(ctx, f, p.key, p.value, p.note, p.forged_cards):
        rec.skipped = "the report was not written (etcd did not confirm it)"
        return
    _hold(f)
    _clean_up(ctx, f, p.key, p.note)
    rec.t_heal = time.monotonic()


_KINDS = {
    "daemon_kill_leader": lambda ctx, f, r: _daemon_kill(ctx, f, r, leader=True),
    "daemon_kill": lambda ctx, f, r: _daemon_kill(ctx, f, r, leader=False),
    "daemon_stop_leader": lambda ctx, f, r: _daemon_stop(ctx, f, r, leader=True),
    "daemon_stop": lambda ctx, f, r: _daemon_stop(ctx, f, r, leader=False),
    "etcd_stop_member": _etcd_stop,
    "etcd_quorum_loss": _quorum_loss,
    "partition_leader_host": _partition,
    "store_death": _store_death,
    "card_swap": _card_swap,
    "device_rename": _device_rename,
    "card_flap": _card_flap,
    "read_burst": _read_burst,
    "etcd_refuses_writes": _refuse_writes,
    "poison_key": _poison_key,
    "registry_deleted": _registry_deleted,
    "registry_forged": _registry_forged,
    "report_unknown_host": _report_unknown_host,
}
