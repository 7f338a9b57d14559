"""``python -m bench.cpu_ab --a TREE --b TREE``: the leading daemon's CPU, two code trees side by
side in the same windows (figure 8's set-up twice).

Figure 8 measures one daemon in one 30 s window; between runs it moves by a fifth (1.27 to 1.60 %
of a core with the same code). To compare two versions of the daemon, this runs figure 8's
set-up twice on one etcd (two clusters): for each tree a daemon with 8 directory cards (TCP
store probes, listeners in this process) that leads, and two witness daemons, every daemon
started from that tree (``PYTHONPATH``). Then ``--windows`` windows of ``--window`` seconds
measure both leaders at once (``/proc``: user and system CPU, reaped children included), so
the machine's load is the same for both. A tree is a directory holding ``awide_cluster``, e.g.
``git archive <commit> awide_cluster | tar -x -C /tmp/base``. No gateway runs (figure 8's
gateway does not talk to the daemon). ``--calibrate`` measures the host's speed
(``bench/calibrate.py``) before the daemons start and after they stop, and prints it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import IO, Any

import yaml

from bench import calibrate
from bench.common import CLK_TCK, Context, find_bench_etcd, make_dir_cards, start_etcd
from bench.fig8_footprint import Listeners, _leader_and_cards, _wait, daemon_config

RUN = [sys.executable, "-c", "from awide_cluster.cli.main import main; main()"]


def user_sys(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of ``pid``, its reaped children included."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return ((int(fields[11]) + int(fields[13])) / CLK_TCK,
            (int(fields[12]) + int(fields[14])) / CLK_TCK)


def start(work: Path, tree: Path, name: str, cfg: dict[str, Any],
          logs: list[IO[bytes]]) -> subprocess.Popen[bytes]:
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    log = open(work / f"{name}.log", "wb")  # noqa: SIM115 - closed at the end of main()
    logs.append(log)
    env = dict(os.environ, PYTHONPATH=str(tree))
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return subprocess.Popen(RUN + ["run", "--config", str(path)], stdin=subprocess.DEVNULL,
                            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tree)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cpu_ab", description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, type=Path, help="the first code tree")
    ap.add_argument("--b", required=True, type=Path, help="the second code tree")
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--window", type=float, default=30.0, help="seconds")
    ap.add_argument("--settle", type=float, default=8.0, help="seconds before the windows")
    ap.add_argument("--out", type=Path, help="the windows' figures as JSON")
    ap.add_argument("--calibrate", action="store_true",
                    help="the host's calibration before and after the windows")
    args = ap.parse_args(argv)
    for tree in (args.a, args.b):
        if not (tree / "awide_cluster" / "__init__.py").is_file():
            raise SystemExit(f"{tree}: no awide_cluster package in it")
    work = Path(tempfile.mkdtemp(prefix="awide-cpu-ab-"))
    ctx = Context(quick=False, work=work, etcd_binary=find_bench_etcd(),
                  log=lambda s: print(s, file=sys.stderr, flush=True))
    cals: dict[str, dict[str, Any]] = {}
    if args.calibrate:
        cals["before"] = calibrate.measure(ctx)
        print(f"calibration (before): {calibrate.brief(cals['before'])}", flush=True)
    etcd = start_etcd(ctx, "etcd")
    eps = etcd.endpoints
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[IO[bytes]] = []
    listeners: list[Listeners] = []
    leaders: dict[str, int] = {}
    keep_logs = True            # until the run ends with every daemon still running
    try:
        for label, tree in (("a", args.a), ("b", args.b)):
            cluster = f"ab{label}{uuid.uuid4().hex[:6]}"
            ls = Listeners(8)
            listeners.append(ls)
            dirs = make_dir_cards(work / f"cards-{label}", 8)
            specs = [{"name": c.name, "kind": "dir", "path": c.path,
                      "store": {"tcp": f"127.0.0.1:{port}"}}
                     for c, port in zip(dirs, ls.ports, strict=True)]
            p = start(work, tree, f"{label}-h1", daemon_config(eps, cluster, "h1", specs), logs)
            procs.append(p)
            _wait(lambda c=cluster: asyncio.run(_leader_and_cards(eps, c)) == ("h1", 8), 60.0,
                  f"{label}: h1 leads with 8 cards in")
            for h in ("h2", "h3"):
                procs.append(start(work, tree, f"{label}-{h}",
                                   daemon_config(eps, cluster, h, []), logs))
            leaders[label] = p.pid
        time.sleep(args.settle)     # not a wait: the leaders settle before the windows
        res: dict[str, list[dict[str, float]]] = {"a": [], "b": []}
        for w in range(args.windows):
            c0 = {k: user_sys(p) for k, p in leaders.items()}
            t0 = time.monotonic()
            time.sleep(args.window)     # not a wait: the measurement window
            c1 = {k: user_sys(p) for k, p in leaders.items()}
            span = time.monotonic() - t0
            for k in leaders:
                user = (c1[k][0] - c0[k][0]) / span * 100
                system = (c1[k][1] - c0[k][1]) / span * 100
                res[k].append({"pct": user + system, "user_pct": user, "sys_pct": system})
            print(f"window {w}: " + "  ".join(
                f"{k} {res[k][-1]['pct']:.2f} % (user {res[k][-1]['user_pct']:.2f}, "
                f"sys {res[k][-1]['sys_pct']:.2f})" for k in leaders)
                + f"  load {os.getloadavg()[0]:.2f}", flush=True)
        for k, tree in (("a", args.a), ("b", args.b)):
            pcts = [r["pct"] for r in res[k]]
            print(f"{k} ({tree}): median {statistics.median(pcts):.2f} % of a core, windows "
                  f"{', '.join(f'{v:.2f}' for v in pcts)}", flush=True)
        if args.out:
            args.out.write_text(json.dumps({"a": str(args.a), "b": str(args.b),
                                            "window_s": args.window, "windows": res,
                                            "calibration": cals}, indent=1) + "\n")
        gone = [p.pid for p in procs if p.poll() is not None]
        keep_logs = bool(gone)
        if gone:
            print(f"daemons that exited during the run: {gone} (logs in {work})")
            return 1
        return 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        for log in logs:
            log.close()
        for ls in listeners:
            ls.close()
        etcd.stop()
        if args.calibrate:
            cals["after"] = calibrate.measure(ctx)
            print(f"calibration (after): {calibrate.brief(cals['after'])}", flush=True)
            if args.out and args.out.exists():
                doc = json.loads(args.out.read_text())
                doc["calibration"] = cals
                args.out.write_text(json.dumps(doc, indent=1) + "\n")
        # the scratch directory goes (etcd's data is hundreds of MB a run); the daemons'
        # logs stay when one of them exited or the run failed
        if keep_logs:
            for d in work.glob("etcd*"):
                shutil.rmtree(d, ignore_errors=True)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
