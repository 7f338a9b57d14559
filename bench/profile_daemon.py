"""``python -m bench.profile_daemon [--window 60] [--out DIR] [--rate HZ] [--tmpfs]``: where the
leader daemon's CPU goes at steady state (docs/profile-daemon.md).

Figure 8's steady cluster (a 3-member etcd, ``awide-cluster run`` leading h1 with 8 directory
cards whose store probes are TCP listeners, two witness daemons, one gateway) settles; then the
leader's CPU share of one core is read from /proc over ``--window`` seconds (as figure 8 reads
it, its reaped children included), and, when ``py-spy`` is on PATH, a second window of the same
length is sampled by ``py-spy record --nonblocking`` (out of process, the daemon not paused)
into ``DIR/daemon.raw`` (collapsed stacks) at ``--rate`` samples a second; the top functions by
own samples and by inclusive samples are printed, and the samples by what the daemon was doing
(``PARTS``: the turn's steps, the leader's cycles, the watches, the probe worker thread).
``--tmpfs``: the cards' directories on a tmpfs (``/dev/shm``), where the write probe's
``fdatasync`` waits for no disk (what the directory kind's disk adds, the rest unchanged).
"""

from __future__ import annotations

import argparse
import collections
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable
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


# what a sample's stack shows the daemon doing: the first part whose frame it holds (a hedged
# etcd request runs in a task of its own, so its caller is not on its stack)
PARTS: tuple[tuple[str, str], ...] = (
    ("_write_probe", "probe worker: write probe (open, pwrite, fdatasync)"),
    ("ProbeWorker._work", "probe worker: other jobs (label reads) and waits"),
    ("CardProbes.observe", "turn: card probes (tasks, TCP connects, worker hand-over)"),
    ("observe_all", "turn: card probes (tasks, TCP connects, worker hand-over)"),
    ("probe_store", "turn: card probes (tasks, TCP connects, worker hand-over)"),
    ("probe_writable", "turn: card probes (tasks, TCP connects, worker hand-over)"),
    ("_discover", "turn: card probes (tasks, TCP connects, worker hand-over)"),
    ("_Job._done", "turn: card probes (tasks, TCP connects, worker hand-over)"),
    ("_Connect.check", "turn: card probes (tasks, TCP connects, worker hand-over)"),
    ("_Round._expire", "turn: card probes (tasks, TCP connects, worker hand-over)"),
    ("_Card._task_done", "turn: card probes (tasks, TCP connects, worker hand-over)"),
    ("TurnLoop._write_report", "turn: report build, encode and write"),
    ("TurnLoop._renew_lease", "turn: lease keep-alive"),
    ("CycleRunner.poll_cycle", "leader: poll cycle (reads, decide)"),
    ("CycleRunner.out_of_turn", "leader: report cycle (reads, decide)"),
    ("ReportsWatch", "leader: members/ watch (frames, decode, news)"),
    ("LeaderWatch", "leader-key watch"),
    ("Election", "turn: election"),
    ("EtcdMembers", "turn: etcd members recheck"),
    ("TurnLoop", "turn: the rest"),
    ("Session.read", "etcd transport: hedged read tasks"),
    ("Session.write", "etcd transport: write tasks"),
    ("aiohttp", "etcd transport: aiohttp callbacks"),
    ("EpollSelector.select", "event loop: select"),
)


def parts(lines: Iterable[str]) -> tuple[list[tuple[str, int]], int]:
    """Samples per ``PARTS`` entry (else "event loop and other") of py-spy's raw lines."""
    got: collections.Counter[str] = collections.Counter()
    total = 0
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        k = int(count)
        total += k
        name = next((what for frame, what in PARTS if frame in stack), "event loop and other")
        got[name] += k
    return got.most_common(), total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.profile_daemon")
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--settle", type=float, default=10.0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    ap.add_argument("--tmpfs", action="store_true",
                    help="the cards' directories on /dev/shm (no disk under the write probe)")
    ap.add_argument("--strace", action="store_true",
                    help="then a third window under `strace -f -c`: system calls a second")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="awide-prof-"))
    out = Path(args.out) if args.out else work
    out.mkdir(parents=True, exist_ok=True)
    ctx = Context(quick=False, work=work, etcd_binary=find_bench_etcd())
    shm = Path(tempfile.mkdtemp(prefix="awide-prof-", dir="/dev/shm")) if args.tmpfs else None
    try:
        with steady_fleet(ctx, work, etcd_name="etcdp", cluster_prefix="pr",
                          cards_dir="cards", cards_root=shm) as fleet:
            return _profile(fleet, args, out)
    finally:
        if shm is not None:
            shutil.rmtree(shm, ignore_errors=True)
        if args.out is None:
            shutil.rmtree(work, ignore_errors=True)
        else:       # the profiles are in --out; etcd's data and the cards go
            for d in (work / "etcdp", work / "cards"):
                shutil.rmtree(d, ignore_errors=True)


def _profile(fleet: Fleet, args: argparse.Namespace, out: Path) -> int:
    """The leader's CPU share over a window, then a py-spy profile of another, if it can."""
    time.sleep(args.settle)     # not a wait: measured on a settled cluster
    pid = fleet.daemons[0].p.pid
    c0, t0 = cpu_seconds(pid, children=True), time.monotonic()
    time.sleep(args.window)     # not a wait: the measured window
    share = (cpu_seconds(pid, children=True) - c0) / (time.monotonic() - t0) * 100.0
    where = "cards on tmpfs" if args.tmpfs else "cards on the work directory's disk"
    print(f"leader daemon CPU: {share:.3f} % of a core over {args.window:g} s "
          f"(/proc, children included, no profiler attached; {where}); Python workload "
          f"{time_python()} (bench/calibrate.py)")
    spy = shutil.which("py-spy")
    if spy is None:
        print("py-spy not on PATH: no profile")
        return 0
    raw = out / "daemon.raw"
    subprocess.run([spy, "record", "--nonblocking", "--format", "raw", "--rate", str(args.rate),
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
    by_part, _ = parts(raw.read_text().splitlines())
    print("by part (the first of PARTS on the stack):")
    for f, k in by_part:
        print(f"  {100.0 * k / total:5.1f} %  {f}")
    if args.strace:
        _syscalls(pid, args.window)
    return 0


def _syscalls(pid: int, window: float, n: int = 15) -> None:
    """The daemon's system calls a second over ``window``, every thread (``strace -f -c``,
    which slows each call: counts, not times, are the finding)."""
    st = shutil.which("strace")
    if st is None:
        print("strace not on PATH: no system call count")
        return
    p = subprocess.Popen([st, "-f", "-c", "-q", "-p", str(pid)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    time.sleep(window)          # not a wait: the counted window
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    rows = []
    for line in err.splitlines():
        f = line.split()
        if len(f) >= 5 and f[3].isdigit() and not f[-1].startswith("-"):
            rows.append((int(f[3]), f[-1]))
    rows.sort(reverse=True)
    total = sum(k for k, name in rows if name != "total")
    print(f"strace: {total / window:.0f} system calls a second over {window:g} s")
    for k, name in rows[:n]:
        if name != "total":
            print(f"  {k / window:7.1f}/s  {name}")


if __name__ == "__main__":
    raise SystemExit(main())
