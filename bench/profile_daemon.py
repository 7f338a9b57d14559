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
import collections
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.calibrate import time_python
from bench.common import Context, cpu_seconds, find_bench_etcd
from bench.fig8_footprint import Fleet, steady_fleet


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
    try:
        with steady_fleet(ctx, work, etcd_name="etcdp", cluster_prefix="pr",
                          cards_dir="cards") as fleet:
            return _profile(fleet, args, out)
    finally:
        if args.out is None:
            shutil.rmtree(work, ignore_errors=True)


def _profile(fleet: Fleet, args: argparse.Namespace, out: Path) -> int:
    """The leader's CPU share over a window, then a py-spy profile of another, if it can."""
    time.sleep(args.settle)     # not a wait: measured on a settled cluster
    pid = fleet.daemons[0].p.pid
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
