"""``python -m bench.profile_daemon [--window 60] [--out DIR]``: where the leader daemon's CPU
goes at steady state (docs/profile-daemon.md).

Figure 8's steady cluster (a 3-member etcd, ``awide-cluster run`` leading h1 with 8 directory
cards whose store probes are TCP listeners, two witness daemons, one gateway) settles; then the
leader's CPU share of one core is read from /proc over ``--window`` seconds (as figure 8 reads
it, its reaped children included), and, when ``py-spy`` is on PATH, a second window of the same
length is sampled by ``py-spy record --nonblocking`` (out of process, the daemon not paused)
into ``DIR/daemon.raw`` (collapsed stacks); the top functions by own samples and by inclusive
samples are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from bench.calibrate import time_python
from bench.common import Context, cpu_seconds, find_bench_etcd, make_dir_cards, start_etcd
from bench.fig8_footprint import Daemon, Listeners, _leader_and_cards, _wait, daemon_config
from bench.proc import Worker


def top(raw: Path, n: int = 15) -> tuple[list[tuple[str, int]], list[tuple[str, int]], int]:
    """(own samples, inclusive samples, total samples) per frame of py-spy's raw output."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        k = int(count)
        total += k
        frames = stack.split(";")
        own[frames[-1]] += k
        for f in set(frames):
            incl[f] += k
    return own.most_common(n), incl.most_common(n), total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.profile_daemon")
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--settle", type=float, default=10.0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="awide-prof-"))
    out = Path(args.out) if args.out else work
    out.mkdir(parents=True, exist_ok=True)
    ctx = Context(quick=False, work=work, etcd_binary=find_bench_etcd())
    etcd = start_etcd(ctx, "etcdp")
    cluster = f"pr{uuid.uuid4().hex[:6]}"
    eps = etcd.endpoints
    listeners = Listeners(8)
    daemons: list[Daemon] = []
    gw: Worker | None = None
    try:
        dirs = make_dir_cards(work / "cards", 8)
        specs = [{"name": c.name, "kind": "dir", "path": c.path,
                  "store": {"tcp": f"127.0.0.1:{port}"}}
                 for c, port in zip(dirs, listeners.ports, strict=True)]
        daemons.append(Daemon(ctx, "h1", daemon_config(eps, cluster, "h1", specs)))
        _wait(lambda: asyncio.run(_leader_and_cards(eps, cluster)) == ("h1", 8), 40.0,
              "h1 leads with 8 cards in")
        daemons += [Daemon(ctx, h, daemon_config(eps, cluster, h, [])) for h in ("h2", "h3")]
        gw = Worker("bench.gwfoot", {"endpoints": list(eps), "cluster": cluster,
                                     "expect_in": 8}, log_dir=work / "logs", name="gwfoot")
        gw.expect("ready", 60.0)
        time.sleep(args.settle)     # not a wait: measured on a settled cluster
        pid = daemons[0].p.pid
        c0, t0 = cpu_seconds(pid, children=True), time.monotonic()
        time.sleep(args.window)     # not a wait: the measured window
        share = (cpu_seconds(pid, children=True) - c0) / (time.monotonic() - t0) * 100.0
        print(f"leader daemon CPU: {share:.3f} % of a core over {args.window:g} s "
              "(/proc, children included, no profiler attached); Python workload "
              f"{time_python()} (bench/calibrate.py)")
        spy = shutil.which("py-spy")
        if spy is None:
            print("py-spy not on PATH: no profile")
            return 0
        raw = out / "daemon.raw"
        subprocess.run([spy, "record", "--nonblocking", "--format", "raw", "--rate", "200",
                        "--duration", str(int(args.window)), "--pid", str(pid),
                        "--output", str(raw)], check=True, capture_output=True, timeout=
                       args.window + 60)
        own, incl, total = top(raw)
        print(f"py-spy: {total} samples of the daemon's busy threads (idle not sampled)")
        print("own samples:")
        for f, k in own:
            print(f"  {100.0 * k / total:5.1f} %  {f}")
        print("inclusive samples:")
        for f, k in incl:
            print(f"  {100.0 * k / total:5.1f} %  {f}")
    finally:
        if gw is not None:
            gw.close()
        for d in daemons:
            d.stop()
        listeners.close()
        etcd.stop()
        if args.out is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
