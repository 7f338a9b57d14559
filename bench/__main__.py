"""``python -m bench [--quick] [--only 5,6] [--out bench/results.json]``: run the benchmarks.

Prints one table of every figure and writes the rows (with the machine, the command, the date
and the load average before and after) to ``bench/results.json``. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import logging
import random
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench import calibrate
from bench.common import REPO, Context, Row, cpu_ticks, find_bench_etcd, loadavg, machine

FIGURES: dict[int, str] = {
    1: "bench.fig1_4_cluster",      # figures 1-4 run together (one embedded cluster)
    5: "bench.fig5_propagation",
    6: "bench.fig6_capacity",
    7: "bench.fig7_faults",
    8: "bench.fig8_footprint",
    9: "bench.fig9_storm",
    10: "bench.fig10_frozen_detection",
}
ALIASES = {2: 1, 3: 1, 4: 1}


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if abs(v) >= 100:
            return f"{v:.0f}"
        if abs(v) >= 1:
            return f"{v:.2f}"
        return f"{v:.3g}"
    return str(v)


def table(rows: list[Row]) -> str:
    head = ["fig", "figure", "value", "unit", "stat", "runs", "median", "p99", "max",
            "floor/base", "ratio", "goal", "met"]
    lines = [head]
    for r in rows:
        fb = r.floor if r.floor is not None else r.baseline
        met = "-" if r.met is None else ("met" if r.met else "MISSED")
        lines.append([str(r.figure), r.name, _fmt(r.value), r.unit, r.stat, str(r.runs),
                      _fmt(r.median), _fmt(r.p99), _fmt(r.max), _fmt(fb), _fmt(r.ratio),
                      r.goal or "-", met])
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = []
    for k, line in enumerate(lines):
        out.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(line)).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def select(only: str | None) -> list[str]:
    if not only:
        return list(dict.fromkeys(FIGURES.values()))
    mods = []
    for part in only.split(","):
        n = int(part)
        n = ALIASES.get(n, n)
        if n not in FIGURES:
            raise SystemExit(f"no figure {part} (figures: 1-10)")
        mods.append(FIGURES[n])
    return list(dict.fromkeys(mods))


def run_figure(mod_name: str, ctx: Context, calibration: dict[str, object],
               errors: dict[str, str], loads: list[dict[str, object]]) -> list[Row]:
    """One figure module's rows, each carrying the run's ``calibration`` (its
    ``extra["calibration"]``); an error goes to ``errors``, the machine's load to ``loads``."""
    t0 = time.monotonic()
    la0, b0 = loadavg(), cpu_ticks()
    ctx.say(f"== {mod_name} ({'quick' if ctx.quick else 'full'})")
    got: list[Row] = []
    try:
        mod = importlib.import_module(mod_name)
        got = mod.run(ctx)
    except Exception as e:  # noqa: BLE001 - one broken figure does not hide the others
        errors[mod_name] = f"{type(e).__name__}: {e}"
        ctx.say(traceback.format_exc())
    finally:
        b1 = cpu_ticks()
        loads.append({"module": mod_name, "seconds": round(time.monotonic() - t0, 1),
                      "loadavg_1m_start": la0[0] if la0 else None,
                      "loadavg_1m_end": next(iter(loadavg()), None),
                      "cpu_busy_pct": round(100.0 * (b1[0] - b0[0]) / (b1[1] - b0[1]), 1)
                      if b1[1] > b0[1] else None})
    for r in got:
        r.extra["calibration"] = calibration
    ctx.say(f"   {mod_name}: {len(got)} rows in {time.monotonic() - t0:.0f} s")
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="short runs (about two minutes)")
    ap.add_argument("--only", help="comma-separated figure numbers (1-4 run together)")
    ap.add_argument("--out", help="where the results go (default bench/results.json for a full "
                    "run of every figure; with --quick bench/results-quick.json, with --only "
                    "bench/results-only-<figures>.json: a quick or partial run never overwrites "
                    "the full run's results that docs/performance.md is rendered from)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--seed", type=int, help="seed of the faults' random phases (default: a "
                    "fresh one per run, printed and recorded in the results)")
    ap.add_argument("--mix-parts", action="store_true", help="figure 6 runs only its "
                    "decomposition: etcd CPU per gateway-second of each part of a gateway's "
                    "mix (default --out bench/results-fig6-parts.json)")
    args = ap.parse_args(argv)
    if args.out is None:
        name = "results-quick.json" if args.quick else "results.json"
        if args.only and not args.quick:
            name = "results-only-" + "-".join(p.strip() for p in args.only.split(",")) + ".json"
        if args.mix_parts:
            name = "results-fig6-parts.json"
        args.out = str(REPO / "bench" / name)

    started = time.monotonic()
    when = datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()
    work = Path(tempfile.mkdtemp(prefix="awide-bench-"))
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
    ctx = Context(quick=args.quick, work=work, etcd_binary=find_bench_etcd(),
                  log=lambda s: print(s, file=sys.stderr, flush=True), seed=seed,
                  mix_parts=args.mix_parts)
    ctx.say(f"seed of the fault phases: {seed} (--seed {seed} repeats them)")
    # the library's own log lines (e.g. "registry stale" while etcd is frozen) go to a file
    logging.basicConfig(filename=str(work / "bench.log"), level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    info = machine()
    busy0 = cpu_ticks()
    rows: list[Row] = []
    errors: dict[str, str] = {}
    loads: list[dict[str, object]] = []      # the machine's load while each figure ran
    calibration: dict[str, object] = {}
    try:
        # the host's speed, measured in this run before the figures (bench/calibrate.py)
        try:
            calibration = calibrate.measure(ctx)
            ctx.say(f"== calibration: {calibrate.brief(calibration)}")
        except Exception as e:  # noqa: BLE001 - the figures still run; the error is recorded
            errors["bench.calibrate"] = f"{type(e).__name__}: {e}"
            ctx.say(traceback.format_exc())
        for mod_name in select(args.only):
            rows.extend(run_figure(mod_name, ctx, calibration, errors, loads))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    elapsed = time.monotonic() - started
    busy1 = cpu_ticks()
    total = busy1[1] - busy0[1]
    busy = round(100.0 * (busy1[0] - busy0[0]) / total, 1) if total > 0 else None
    print(table(rows))
    for mod_name, err in errors.items():
        print(f"ERROR {mod_name}: {err}")
    end_load = loadavg()
    doc = {
        "command": "python -m bench" + (" --quick" if args.quick else "")
                   + (f" --only {args.only}" if args.only else "")
                   + (" --mix-parts" if args.mix_parts else "") + f" --seed {seed}",
        "seed": seed,
        "mode": "quick" if args.quick else "full",
        "date": when,
        "elapsed_s": round(elapsed, 1),
        "machine": {**info, "loadavg_end": end_load,
                    "cpu_busy_pct_during_run": busy},   # the bench's own processes included
        "etcd_binary": ctx.etcd_binary,
        "calibration": calibration,
        "figure_load": loads,
        "figures": [r.to_dict() for r in rows],
        "errors": errors,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"machine: {info['nproc']} cores, {info['cpu']}; load average "
          f"{' '.join(info['loadavg_start'])} at start, "
          f"{' '.join(end_load)} at end; CPU busy {busy} % "
          "during the run (the bench included)")
    print(f"calibration: {calibrate.brief(calibration)}")
    for ld in loads:
        print(f"  {ld['module']}: {ld['seconds']} s, load average (1 min) "
              f"{ld['loadavg_1m_start']} -> {ld['loadavg_1m_end']}, "
              f"CPU busy {ld['cpu_busy_pct']} %")
    print(f"wrote {out} ({len(rows)} rows, {elapsed:.0f} s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
