"""Figure 10: detection with one etcd member frozen, each member in turn (the first-listed one
included).

The embedded cluster of figures 1-4 (real etcd, daemons, store services, ``gateway watch``
processes; the default timing). Every daemon and gateway lists the etcd members in the same
order, member 0 first. For each member in turn, each run: the member is frozen (SIGSTOP: its
sockets accept, nothing answers) at a random phase of the poll, a card's store service is
SIGKILLed a random 0..1 poll later, and the time until the card is out on every gateway is
measured from the kill; then the member is thawed, the store started again and the cluster
settles before the next run. A gateway whose watch sits on the frozen member must move it
within its proof window, or the change arrives only with its next poll.

Floor: sick polls x poll interval (as figure 1). Goal: p99 <= floor + 0.25 s (3.25 s at the
default timing) with any single member frozen. One row per frozen member and one over all
runs; the ratio is p99 / floor.
"""

from __future__ import annotations

import time
from typing import Any

from awide_harness.cluster import EmbeddedCluster
from awide_harness.spec import ClusterSpec, Timing, bounds
from awide_harness.views import card_in, card_out
from bench.common import Context, Row, latency_row
from bench.fig1_4_cluster import _every, _settle

MARGIN_S = 0.25             # the goal's margin over the floor


def _runs_with_frozen(ctx: Context, c: EmbeddedCluster, t: Timing, member: int, runs: int,
                      rng: Any) -> tuple[list[float], int]:
    b = bounds(t)
    det: list[float] = []
    missed = 0
    keys_ = list(c.cards)
    for r in range(runs):
        key = keys_[r % len(keys_)]
        cid = c.card_id(key)
        time.sleep(rng.uniform(0.0, t.poll_interval))   # not a wait: the freeze's random phase
        c.etcd.freeze(member)
        try:
            time.sleep(rng.uniform(0.0, t.poll_interval))   # not a wait: the kill's phase
            t0 = c.card_store_kill(key)
            d = _every(c.wait_until(card_out(cid), b.detection, since=t0), t0)
        finally:
            c.etcd.thaw(member)
        if d is None:
            missed += 1
        else:
            det.append(d)
        c.etcd.wait_healthy()
        t1 = c.card_store_start(key)
        c.wait_until(card_in(cid), b.return_, since=t1)
        ctx.say(f"  member {member} frozen, run {r + 1}/{runs} {key}: detection "
                f"{d if d is None else round(d, 3)} s")
        _settle(c, b.restart)
    return det, missed


def run(ctx: Context) -> list[Row]:
    t = Timing()            # the default timing in both modes: the goal is stated on it
    runs, gateways = (10, 2) if ctx.quick else (30, 3)
    spec = ClusterSpec(cluster="bench10", storage_hosts=2, cards_per_host=1, witness_hosts=1,
                       gateways=gateways, timing=t, etcd_binary=ctx.etcd_binary,
                       first_leader="w1")
    floor = t.sick_polls * t.poll_interval
    goal_s = floor + MARGIN_S
    goal = f"p99 <= floor + {MARGIN_S:g} s ({goal_s * 1000:.0f} ms)"
    setting: dict[str, Any] = {"poll_interval_s": t.poll_interval,
                               "sick_polls": t.sick_polls,
                               "call_timeout_s": t.call_timeout, "gateways": gateways,
                               "runs_per_member": runs}
    rng = ctx.rng(10)
    rows: list[Row] = []
    every: list[float] = []
    missed_all = 0
    with EmbeddedCluster(ctx.work / "embedded10", spec) as c:
        endpoints = c.etcd.endpoints
        for member in range(c.etcd.size):
            det, missed = _runs_with_frozen(ctx, c, t, member, runs, rng)
            every += det
            missed_all += missed
            which = "first-listed" if member == 0 else f"listed {member + 1}"
            row = latency_row(10, f"detection, etcd member {member} ({which}) frozen: store "
                                  "killed -> out on every gateway", det, floor_s=floor,
                              goal=goal, goal_s=goal_s,
                              note=(f"{missed} run(s) missed" if missed else ""),
                              frozen_member=member, endpoint=endpoints[member], missed=missed,
                              **setting)
            if missed:
                row.met = False
            rows.append(row)
            ctx.say(f"  {row.name}: p99 {row.p99} ms, median {row.median} ms, max {row.max} ms"
                    f" ({len(det)} runs, {missed} missed)")
    total = latency_row(10, "detection, any one etcd member frozen (all runs)", every,
                        floor_s=floor, goal=goal, goal_s=goal_s,
                        note=(f"{missed_all} run(s) missed" if missed_all else ""),
                        missed=missed_all, **setting)
    if missed_all:
        total.met = False
    return [*rows, total]
