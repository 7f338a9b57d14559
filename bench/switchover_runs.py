"""Only the leader switchover of figure 4, N times: ``python -m bench.switchover_runs [--runs
30] [--seed S] [--logs DIR] [--out FILE]``.

The cluster, the timing and each run are figure 4's (``fig1_4_cluster._handover`` with
``switchover``: request, grant seen on a watch, drain put, first fenced write by the next
leader), without figures 1-3 and the SIGKILL/SIGTERM hand-overs before it, so that a
before/after comparison of the switchover fits in a few minutes. Prints the calibration line,
the row (median, p99, max) and, per run, the grant's wall-clock time (to find the run in the
daemons' logs, kept in ``--logs``).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from awide_cluster.contract import keys
from awide_harness.cluster import EmbeddedCluster
from awide_harness.spec import ClusterSpec, Timing
from awide_harness.store_thread import StoreThread
from awide_harness.waits import wait_until_sync
from bench import calibrate
from bench.common import Context, find_bench_etcd, loadavg, machine
from bench.fig1_4_cluster import (
    RegistryWatch,
    _grant,
    _handover,
    _history_write,
    _put,
    _row,
)


def _fill_history(ctx: Context, c: EmbeddedCluster, st: StoreThread, n: int) -> None:
    """About ``n`` history entries: batches of 64 intents that do not decode, each deleted
    by the leader's next cycle with one ``intent`` entry (the ring keeps the newest 500)."""
    t0 = time.monotonic()
    done = 0
    while done < n:
        batch = min(64, n - done)
        for i in range(batch):
            _put(st, keys.INTENTS + f"fill-{done + i:04d}", b"not an intent record " * 8)
        wait_until_sync(lambda: not st.call(
            lambda s: s.range(keys.INTENTS, prefix=True, keys_only=True), 2.0).kvs,
            30.0, "the leader deletes the refused intents", poll=0.1)
        done += batch
    kv = c.read_key(keys.HISTORY)
    size = len(kv.value) if kv is not None else 0
    ctx.say(f"history filled with {done} refused intents in {time.monotonic() - t0:.1f} s: "
            f"{size} bytes")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.switchover_runs",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--logs", help="copy the cluster's logs (daemons, gateways, etcd) here")
    ap.add_argument("--out", help="write the row and the per-run times here (JSON)")
    ap.add_argument("--fill-history", type=int, default=0, metavar="N",
                    help="first fill the history ring with about N entries (refused intents, "
                         "64 a cycle), as a full run's figures 1-3 leave it")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
    work = Path(tempfile.mkdtemp(prefix="awide-swo-"))
    ctx = Context(quick=False, work=work, etcd_binary=find_bench_etcd(),
                  log=lambda s: print(s, file=sys.stderr, flush=True), seed=seed)
    ctx.say(f"seed {seed}")
    logging.basicConfig(filename=str(work / "bench.log"), level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # monotonic -> wall clock, for the daemons' log lines
    wall = time.time() - time.monotonic()
    try:
        cal = calibrate.measure(ctx)
        ctx.say(f"calibration: {calibrate.brief(cal)}")
        t = Timing()
        spec = ClusterSpec(cluster="bench", storage_hosts=2, cards_per_host=1, witness_hosts=1,
                           gateways=3, timing=t, etcd_binary=ctx.etcd_binary,
                           first_leader="w1")
        setting = {"poll_interval_s": t.poll_interval, "lease_ttl_s": t.lease_ttl,
                   "call_timeout_s": t.call_timeout, "gateways": 3, "hosts": len(spec.hosts)}
        la0 = loadavg()
        with EmbeddedCluster(work / "embedded", spec) as c:
            watch = RegistryWatch(c.store_config())
            grants = RegistryWatch(c.store_config(), keys.SWITCHOVER, _grant)
            histories = RegistryWatch(c.store_config(), keys.HISTORY, _history_write)
            st = StoreThread(c.store_config())
            if args.fill_history:
                _fill_history(ctx, c, st, args.fill_history)
            drained: list[float] = []
            try:
                ho, missed, camp = _handover(ctx, c, t, args.runs, "switchover", watch, st,
                                             grants, histories, drained, [])
                granted = [(round(g.t + wall, 3), g.leader) for g in grants.writes if g.leader]
            finally:
                histories.close()
                grants.close()
                watch.close()
                st.close()
            row = _row(4, "leader switchover: grant -> first fenced write by the next leader",
                       ho, missed, None, "p99 <= 100 ms", 0.1, setting, campaign=camp,
                       drain_written=[round(x, 3) for x in drained])
        if args.logs:
            shutil.copytree(work / "embedded" / "logs", args.logs, dirs_exist_ok=True)
    finally:
        logs_kept = args.logs
        shutil.rmtree(work, ignore_errors=True)
    samples = [round(x, 4) for x in ho]
    print(f"calibration: {calibrate.brief(cal)}")
    print(f"machine: {machine()['nproc']} cores; load average {' '.join(la0)} at start, "
          f"{' '.join(loadavg())} at end")
    print(f"{row.name}: runs {row.runs}, missed {missed}, median {row.median} ms, "
          f"p99 {row.p99} ms, max {row.max} ms")
    slow = sorted(range(len(samples)), key=lambda i: -samples[i])[:3]
    print("slowest: " + ", ".join(f"run {i + 1} {samples[i] * 1000:.1f} ms" for i in slow))
    late = [i for i, (x, d) in enumerate(zip(ho, drained, strict=False)) if d - x > 0.1]
    mid = statistics.median(drained) * 1000 if drained else 0.0
    print(f"drain written by a later cycle than the first write (> 100 ms after it): "
          f"{len(late)} of {len(drained)} runs; grant -> drain written: median {mid:.1f} ms, "
          f"max {max(drained, default=0) * 1000:.1f} ms")
    for i, (at, by) in enumerate(granted):
        when = time.strftime("%H:%M:%S", time.gmtime(at)) + f".{int(at * 1000) % 1000:03d}"
        print(f"  grant {i + 1} by {by} at {when} UTC"
              + (f": first write {samples[i] * 1000:.1f} ms, drain {drained[i] * 1000:.1f} ms"
                 if i < len(samples) and i < len(drained) else ""))
    if args.out:
        Path(args.out).write_text(json.dumps({
            "command": "python -m bench.switchover_runs " + " ".join(argv or sys.argv[1:]),
            "seed": seed, "calibration": cal, "row": row.to_dict(), "samples_s": samples,
            "grants_wall": granted, "logs": logs_kept}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
