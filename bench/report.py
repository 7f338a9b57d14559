"""``python -m bench.report [bench/results.json]``: the results of a run as a Markdown table
(what docs/performance.md shows), with the machine, the command and the date."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench import calibrate
from bench.__main__ import _fmt
from bench.common import REPO


def markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    mem = next((line.split()[1] for line in m.get("free_h", "").splitlines()
                if line.startswith("Mem:")), "?")
    lines = [
        f"Run: `{doc['command']}` on {doc['date']} ({doc['elapsed_s']:.0f} s). Machine: "
        f"{m['nproc']} cores ({m['cpu']}), {mem} memory, Python {m['python']}, "
        f"etcd `{Path(doc['etcd_binary']).name}` from `{doc['etcd_binary']}`. Load average "
        f"{' '.join(m['loadavg_start'])} at the start, {' '.join(m['loadavg_end'])} at the end; "
        f"the machine's CPUs were {m.get('cpu_busy_pct_during_run')} % busy during the run "
        "(the bench's own processes included).",
        "",
        "Load while each part ran (1-minute load average at its start and end, the machine's CPU "
        "busy share): " + "; ".join(
            f"{ld['module'].removeprefix('bench.')} {ld['loadavg_1m_start']}->"
            f"{ld['loadavg_1m_end']}, {ld['cpu_busy_pct']} %"
            for ld in doc.get("figure_load", [])) + ".",
        "",
        "Calibration of the host, measured in the same run before the figures "
        "(`bench/calibrate.py`): " + (calibrate.brief(doc["calibration"])
                                      if doc.get("calibration") else "not recorded") + ".",
        "",
        "| fig | figure | value | unit | stat | runs | median | p99 | max | floor / baseline "
        "| ratio | goal | met |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["figures"]:
        fb = r["floor"] if r["floor"] is not None else r["baseline"]
        met = "–" if r["met"] is None else ("met" if r["met"] else "**missed**")
        ratio = _fmt(r["ratio"]) + (f" ({r['ratio_of']})" if r.get("ratio_of") else "")
        lines.append(
            f"| {r['figure']} | {r['name']} | {_fmt(r['value'])} | {r['unit']} | {r['stat']} "
            f"| {r['runs']} | {_fmt(r['median'])} | {_fmt(r['p99'])} | {_fmt(r['max'])} "
            f"| {_fmt(fb)} | {ratio if r['ratio'] is not None else '–'} | {r['goal'] or '–'} "
            f"| {met} |")
    if doc.get("errors"):
        lines += ["", "Errors: " + "; ".join(f"{k}: {v}" for k, v in doc["errors"].items())]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else REPO / "bench" / "results.json"
    print(markdown(json.loads(path.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
