"""Figures 1-4 on a whole embedded cluster (``EmbeddedCluster``: real etcd, daemons, store
services and ``gateway watch`` processes; every gateway stamps its views with
``time.monotonic()``).

1. detection: a card's store service SIGKILLed -> the card out on every gateway.
   Floor: sick polls x poll interval. Goal: p99 <= floor + 0.05 s.
2. return: the store service started again -> the card in on every gateway.
   Floor: healthy polls x poll interval. Goal: p99 <= 1 poll + 0.05 s.
3. join: a new card on a host (labelled directory, store service, config rewritten, SIGHUP)
   -> placed and in service on every gateway. Floor: 1 poll. Goal: <= 2 polls.
4. leader hand-over: the leader daemon SIGKILLed (or SIGTERMed) -> first fenced registry
   write by the next leader. A new leader writes the registry only when its content changes,
   so a pending change is made the moment the old leader can no longer take it: a ``drain``
   intent for a card of another host (SIGKILL: put right after the kill; SIGTERM: the leader
   is SIGSTOPped, the intent put, then SIGTERM + SIGCONT). A watch on ``registry`` sees the
   first write naming another leader. Floor: the lease TTL (SIGKILL). Goal: <= TTL + 0.5 s;
   on a clean stop (SIGTERM) <= 0.1 s. Leader switchover (``intents/switchover``, as
   ``awide-cluster leader switchover``): the old leader grants it after a cycle (its key
   deleted in the same transaction); the drain intent is put the moment a watch sees the
   grant, and the figure runs from the grant to the first write naming the next leader
   (``campaign``: request -> grant). Goal <= 0.1 s as SIGTERM.

A value per run is the time the *last* gateway showed the change (the "every gateway" time);
a run in which a gateway never showed it within the harness's bound is counted as missed.
"""

from __future__ import annotations

import asyncio
import functools
import json
import signal
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from awide_cluster.contract import keys
from awide_cluster.contract.records import IntentRecord, SwitchoverRecord, decode_switchover
from awide_cluster.contract.registry import decode
from awide_cluster.store import EtcdStore, StoreConfig
from awide_harness.cluster import EmbeddedCluster
from awide_harness.spec import ClusterSpec, Timing, bounds
from awide_harness.store_thread import StoreThread
from awide_harness.views import card_in, card_out, cards_in
from awide_harness.waits import WaitTimeout, wait_until_sync
from bench.common import Context, Row, latency_row


@dataclass(frozen=True)
class RegistryWrite:
    t: float              # time.monotonic() the watch delivered it
    mod_revision: int
    leader: str
    drained: frozenset[str]


def _registry_write(t: float, kv: Any) -> RegistryWrite:
    reg = decode(kv.value)
    return RegistryWrite(t, kv.mod_revision, reg.leader,
                         frozenset(c.id for c in reg.cards if c.state == "drained"))


def _history_write(t: float, kv: Any) -> RegistryWrite:
    """A write of ``history``: ``leader`` the leader that wrote its newest entry (every fenced
    transaction of a leader that writes the ring appends its own entries). Read with ``json``
    alone: a validated decode of a full ring costs the bench's process tens of ms, beside the
    thread that puts the drain and the watch that stamps the registry's writes."""
    entries = json.loads(kv.value).get("entries") or [{}]
    return RegistryWrite(t, kv.mod_revision, str(entries[-1].get("leader", "")), frozenset())


def _grant(t: float, kv: Any) -> RegistryWrite:
    """A write of ``intents/switchover``: ``leader`` the host it was granted by ("" not yet)."""
    return RegistryWrite(t, kv.mod_revision, decode_switchover(kv.value).granted_by,
                         frozenset())


class RegistryWatch:
    """Every write of ``key`` (``registry``; ``intents/switchover`` with ``parse=_grant``) as
    the bench sees it through a watch (own thread + loop)."""

    def __init__(self, config: StoreConfig, key: str = keys.REGISTRY,
                 parse: Any = _registry_write) -> None:
        self.key, self.parse = key, parse
        self.writes: list[RegistryWrite] = []
        self.errors = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(config,), name="bench-watch",
                                        daemon=True)
        self._thread.start()
        self._ready.wait(5.0)

    def _run(self, config: StoreConfig) -> None:
        asyncio.set_event_loop(self._loop)
        self._task = self._loop.create_task(self._watch(config))
        try:
            self._loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        finally:
            self._loop.close()

    async def _watch(self, config: StoreConfig) -> None:
        store = EtcdStore(config)
        try:
            start = (await store.range(self.key, keys_only=True)).revision + 1
            self._ready.set()
            while not self._stop.is_set():
                try:
                    async with store.watch(self.key, start_revision=start,
                                           stall_after=5.0) as w:
                        async for batch in w:
                            now = time.monotonic()
                            for ev in batch.events:
                                if ev.kind != "put":
                                    continue
                                start = ev.kv.mod_revision + 1
                                try:
                                    write = self.parse(now, ev.kv)
                                except Exception:  # noqa: BLE001 - not ours to judge here
                                    continue
                                with self._lock:
                                    self.writes.append(write)
                            if self._stop.is_set():
                                return
                except Exception:  # noqa: BLE001 - etcd trouble: resume the watch
                    self.errors += 1
                    await asyncio.sleep(0.05)   # not a wait: the watch's retry back-off
        finally:
            self._ready.set()
            await store.close()

    def first(self, since: float, pred: Any, bound: float) -> RegistryWrite | None:
        def hit() -> RegistryWrite | None:
            with self._lock:
                return next((w for w in self.writes if w.t >= since and pred(w)), None)

        try:
            return wait_until_sync(hit, bound, "a registry write", poll=0.005)
        except WaitTimeout:
            return None

    def close(self) -> None:
        self._stop.set()
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(5.0)


def _every(seen: dict[str, float | None], t0: float) -> float | None:
    """The time after ``t0`` at which the last gateway showed the change (None: one never did)."""
    if not seen or any(t is None for t in seen.values()):
        return None
    return max(t for t in seen.values() if t is not None) - t0


def _settle(c: EmbeddedCluster, bound: float) -> None:
    ids = [c.card_id(k) for k in c.cards]
    c.wait_until(cards_in(ids), bound)
    c.wait_agree(bound)


def _detect_return(ctx: Context, c: EmbeddedCluster, t: Timing, runs: int
                   ) -> tuple[list[float], list[float], int, int]:
    b = bounds(t)
    det, ret, det_miss, ret_miss = [], [], 0, 0
    keys_ = list(c.cards)
    rng = ctx.rng(1)
    for r in range(runs):
        key = keys_[r % len(keys_)]
        cid = c.card_id(key)
        time.sleep(rng.uniform(0.0, t.poll_interval))   # not a wait: the fault's random phase
        t0 = c.card_store_kill(key)
        d = _every(c.wait_until(card_out(cid), b.detection, since=t0), t0)
        if d is None:
            det_miss += 1
        else:
            det.append(d)
        # the store back at a random phase too: the card went out right after one of its host's
        # reports, so a fixed pause here would place every return at the same phase
        time.sleep(rng.uniform(0.0, t.poll_interval))   # not a wait: a random phase
        t1 = c.card_store_start(key)
        x = _every(c.wait_until(card_in(cid), b.return_, since=t1), t1)
        if x is None:
            ret_miss += 1
        else:
            ret.append(x)
        ctx.say(f"  run {r + 1}/{runs} {key}: detection {d if d is None else round(d, 3)} s, "
                f"return {x if x is None else round(x, 3)} s")
        _settle(c, b.restart)
    return det, ret, det_miss, ret_miss


def _wait_daemon_up(c: EmbeddedCluster, host: str, bound: float) -> bool:
    """True once the host's daemon API answers (its signal handlers are installed by then: a
    SIGHUP sent earlier would end a daemon still importing, SIGHUP's default action)."""
    def answers() -> bool:
        if not c.daemon_alive(host):
            raise WaitTimeout(f"daemon {host}'s API", bound, "the daemon exited")
        try:
            with urllib.request.urlopen(c.api_url(host) + "/healthz", timeout=0.5):
                return True
        except urllib.error.HTTPError:
            return True                      # it answered (e.g. 503 while not ready)
        except OSError:
            return False

    try:
        return wait_until_sync(answers, bound, f"daemon {host}'s API answers", poll=0.05)
    except WaitTimeout:
        return False


def _exited(c: EmbeddedCluster, host: str) -> bool:
    return not c.daemon_alive(host)


def _put(st: StoreThread, key: str, value: bytes) -> None:
    def put() -> bool:
        st.call(lambda s: s.put(key, value, timeout=1.0), 2.0)
        return True

    # etcd electing: the put is idempotent, so it is repeated
    wait_until_sync(put, 5.0, f"etcd takes the put of {key}", poll=0.05, ignore=(Exception,))


def _handover(ctx: Context, c: EmbeddedCluster, t: Timing, runs: int, how: str,
              watch: RegistryWatch, st: StoreThread, grants: RegistryWatch,
              histories: RegistryWatch, drained: list[float], acted: list[int]
              ) -> tuple[list[float], int, list[float]]:
    """``drained`` (switchover): grant -> the registry write with the drain, per run.
    ``acted`` (SIGTERM): counts the runs redone because the stopping leader wrote the change
    itself: the SIGSTOP caught it in a turn before its cycle's read, and on SIGCONT that turn
    read the change and wrote it before the stop was handled (a fenced write of the leader
    still in office: no hand-over to time). Such a run is redone with a new phase, at most
    ``runs`` times in all."""
    b = bounds(t)
    out: list[float] = []
    missed = 0
    campaign: list[float] = []
    rng = ctx.rng(4)
    acted.append(0)
    while len(out) + missed < runs:     # each run ends measured or missed, or is redone
        r = len(out) + missed
        got = c.wait_leader(b.election)
        if got is None:
            missed += 1
            continue
        old = got[0]
        # a card of another host takes the pending change (a drain intent)
        victim = next(k for k in c.cards if c.card_host(k) != old)
        cid = c.card_id(victim)
        time.sleep(rng.uniform(0.0, t.poll_interval))   # not a wait: the kill's random phase
        if how == "switchover":
            # the request; the change is put the moment the grant is seen (the old leader
            # answers after a cycle that left the registry current: a change pending before
            # would be its own), and t0 is the grant (the old leader's key deleted with it)
            t_req = time.monotonic()
            _put(st, keys.SWITCHOVER, SwitchoverRecord(by="bench").encode())
            g = grants.first(t_req, lambda w, old=old: w.leader == old, b.handover + 2.0)
            if g is None:
                missed += 1
                ctx.say(f"  switchover run {r + 1}: not granted within the bound")
                _settle(c, b.restart + b.handover)
                continue
            _put(st, keys.intent(cid), IntentRecord("drain", by="bench").encode())
            t0 = g.t
            campaign.append(g.t - t_req)
        elif how == "SIGKILL":
            t0 = c.kill_daemon(old)
            _put(st, keys.intent(cid), IntentRecord("drain", by="bench").encode())
        else:
            c.daemon_signal(old, signal.SIGSTOP)
            _put(st, keys.intent(cid), IntentRecord("drain", by="bench").encode())
            t0 = c.daemon_signal(old, signal.SIGTERM)
            c.daemon_signal(old, signal.SIGCONT)
        w = watch.first(t0, lambda w, cid=cid: cid in w.drained,
                        b.election + 2 * t.poll_interval + 2.0)
        if how == "SIGTERM" and w is not None and w.leader == old and acted[-1] < runs:
            acted[-1] += 1
            ctx.say(f"  {how} run {r + 1}: the stopping leader wrote the change itself in its "
                    "last turn (no hand-over to time): run again")
        elif w is None or w.leader == old:
            missed += 1
            ctx.say(f"  {how} run {r + 1}: no write by a new leader "
                    f"({'the old leader wrote it' if w else 'none within the bound'})")
        else:
            first = w.t
            if how == "switchover":
                # the drain was put after the grant, so the new term's first cycle may have
                # read before it landed (then only its history entry is written, and the
                # drain waits for the new leader's next poll cycle): the first fenced write
                # is the new term's first transaction, whichever key it wrote
                h = histories.first(t0, lambda x, old=old: x.leader not in ("", old), 0.5)
                if h is not None and h.t < first:
                    first = h.t
                drained.append(w.t - t0)
            out.append(first - t0)
            nl = c.wait_leader(0.5, other_than=old)
            if nl is not None:
                campaign.append(nl[1] - t0)
            ctx.say(f"  {how} run {r + 1}: {old} -> {w.leader}: first fenced write after "
                    f"{first - t0:.3f} s" + (f" (the drain after {w.t - t0:.3f} s)"
                                             if how == "switchover" else ""))
        # undo: undrain, restart the old daemon, wait until everything is in again
        _put(st, keys.intent(cid), IntentRecord("undrain", by="bench").encode())
        if how == "switchover":                     # the old daemon runs on, a follower
            _settle(c, b.restart + b.handover)
            continue
        try:                                                        # SIGTERM: let it exit
            wait_until_sync(functools.partial(_exited, c, old), 10.0, f"daemon {old} exits")
        except WaitTimeout:
            pass
        c.restart_daemon(old)
        _wait_daemon_up(c, old, 20.0)
        _settle(c, b.restart + b.handover)
    return out, missed, campaign


def _joins(ctx: Context, c: EmbeddedCluster, t: Timing, runs: int) -> tuple[list[float], int]:
    b = bounds(t)
    out: list[float] = []
    missed = 0
    hosts = list(c.storage_hosts)
    rng = ctx.rng(3)
    for r in range(runs):
        time.sleep(rng.uniform(0.0, t.poll_interval))   # not a wait: the join's random phase
        key = c.add_card(hosts[r % len(hosts)])
        t0 = c.last_fault_at
        assert t0 is not None
        x = _every(c.wait_until(card_in(c.card_id(key)), b.join + b.slack, since=t0), t0)
        if x is None:
            missed += 1
        else:
            out.append(x)
        ctx.say(f"  join {r + 1}/{runs} {key}: {x if x is None else round(x, 3)} s")
        c.wait_agree(b.agreement)
    return out, missed


def run(ctx: Context) -> list[Row]:
    if ctx.quick:
        t, dr_runs, ho_runs, join_runs, gateways = Timing.quick(), 3, 2, 2, 2
    else:
        # joins: 6, the slots left by the 2 cards the cluster starts with (at most 8 are
        # placed; a 9th card is kept out with its reason, not a join to time)
        t, dr_runs, ho_runs, join_runs, gateways = Timing(), 30, 30, 6, 3
    spec = ClusterSpec(cluster="bench", storage_hosts=2, cards_per_host=1, witness_hosts=1,
                       gateways=gateways, timing=t, etcd_binary=ctx.etcd_binary,
                       first_leader="w1")
    P = t.poll_interval
    setting = {"poll_interval_s": P, "sick_polls": t.sick_polls,
               "healthy_polls": t.healthy_polls, "lease_ttl_s": t.lease_ttl,
               "call_timeout_s": t.call_timeout, "gateways": gateways,
               "hosts": len(spec.hosts)}
    rows: list[Row] = []
    t_start = time.monotonic()
    with EmbeddedCluster(ctx.work / "embedded", spec) as c:
        ctx.say(f"  embedded cluster up in {time.monotonic() - t_start:.1f} s "
                f"({len(spec.hosts)} hosts, {gateways} gateways, poll {P:g} s)")
        det, ret, det_miss, ret_miss = _detect_return(ctx, c, t, dr_runs)
        floor1 = t.sick_polls * P
        rows.append(_row(1, "detection: store killed -> out on every gateway", det, det_miss,
                         floor1, f"p99 <= floor + 0.05 s ({(floor1 + 0.05) * 1000:.0f} ms)",
                         floor1 + 0.05, setting))
        floor2 = t.healthy_polls * P
        rows.append(_row(2, "return: store back -> in on every gateway", ret, ret_miss, floor2,
                         f"p99 <= 1 poll + 0.05 s ({(P + 0.05) * 1000:.0f} ms)", P + 0.05,
                         setting))
        watch = RegistryWatch(c.store_config())
        grants = RegistryWatch(c.store_config(), keys.SWITCHOVER, _grant)
        histories = RegistryWatch(c.store_config(), keys.HISTORY, _history_write)
        st = StoreThread(c.store_config())
        drained: list[float] = []
        try:
            for how in ("SIGKILL", "SIGTERM", "switchover"):
                acted: list[int] = []
                ho, missed, camp = _handover(ctx, c, t, ho_runs, how, watch, st, grants,
                                             histories, drained, acted)
                if how == "SIGKILL":
                    rows.append(_row(4, "leader hand-over, SIGKILL: first fenced write by the "
                                        "next leader", ho, missed, float(t.lease_ttl),
                                     f"p99 <= TTL + 0.5 s ({(t.lease_ttl + 0.5) * 1000:.0f} ms)",
                                     t.lease_ttl + 0.5, setting, campaign=camp))
                elif how == "SIGTERM":
                    rows.append(_row(4, "leader hand-over, SIGTERM: first fenced write by the "
                                        "next leader", ho, missed, None, "p99 <= 100 ms", 0.1,
                                     setting, campaign=camp, old_leader_acted=acted[0]))
                else:       # campaign: here the request -> the grant
                    rows.append(_row(4, "leader switchover: grant -> first fenced write by the "
                                        "next leader", ho, missed, None, "p99 <= 100 ms", 0.1,
                                     setting, campaign=camp,
                                     drain_written=[round(x, 3) for x in drained]))
        finally:
            histories.close()
            grants.close()
            watch.close()
            st.close()
        joins, j_miss = _joins(ctx, c, t, join_runs)
        rows.append(_row(3, "join: new card (SIGHUP) -> placed and in on every gateway", joins,
                         j_miss, P, f"p99 <= 2 polls ({2 * P * 1000:.0f} ms)", 2 * P, setting))
    rows.sort(key=lambda r: r.figure)
    return rows


def _row(fig: int, name: str, values: list[float], missed: int, floor: float | None, goal: str,
         goal_s: float, setting: dict[str, Any], **extra: Any) -> Row:
    row = latency_row(fig, name, values, floor_s=floor, goal=goal, goal_s=goal_s,
                      note=(f"{missed} run(s) missed (not within the harness bound)"
                            if missed else ""),
                      missed=missed, **setting, **extra)
    if missed:
        row.met = False
    if extra.get("campaign"):
        row.extra["campaign"] = [round(x, 3) for x in extra["campaign"]]
    return row
