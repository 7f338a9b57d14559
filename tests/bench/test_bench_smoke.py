"""The benchmark machinery: statistics and the table (pure), and one quick figure end to end
(``python -m bench --quick --only 8``) writing a valid ``results.json``. No timing assertions:
only the shape of what a run reports is checked."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from awide_harness import waits
from bench.__main__ import select, table
from bench.common import Row, latency_row, pct
from bench.report import markdown

REPO = Path(__file__).resolve().parents[2]


def test_nearest_rank_percentiles() -> None:
    values = [float(i) for i in range(1, 101)]          # 1..100
    assert pct(values, 50) == 50.0
    assert pct(values, 99) == 99.0
    assert pct(values, 100) == 100.0
    assert pct([3.0], 99) == 3.0
    assert pct([], 99) is None
    assert pct([5.0, 1.0, 3.0], 50) == 3.0               # order does not matter


def test_latency_row_goal_and_ratio() -> None:
    row = latency_row(1, "x", [0.1, 0.2, 0.3], floor_s=0.1, goal="p99 <= 250 ms",
                      goal_s=0.25)
    assert row.value == 300.0 and row.unit == "ms" and row.runs == 3
    assert row.floor == 100.0 and row.ratio == 3.0
    assert row.met is False
    ok = latency_row(1, "y", [0.1], goal="p99 <= 250 ms", goal_s=0.25)
    assert ok.met is True
    none = latency_row(1, "z", [], goal="p99 <= 250 ms", goal_s=0.25)
    assert none.value is None and none.met is None


def test_table_shows_every_row_and_missed_goals() -> None:
    rows = [Row(6, "capacity", 250.0, "gateways", 2, stat="value", goal=">= 2000", met=False),
            Row(8, "daemon RSS", 50.0, "MB", 10, stat="max", goal="<= 60 MB", met=True)]
    text = table(rows)
    assert "capacity" in text and "daemon RSS" in text
    assert "MISSED" in text and "met" in text
    assert len(text.splitlines()) == 2 + len(rows)


def test_select_figures() -> None:
    assert select("2,4") == ["bench.fig1_4_cluster"]
    assert select("5,6") == ["bench.fig5_propagation", "bench.fig6_capacity"]
    assert select("9") == ["bench.fig9_storm"]
    assert select("10") == ["bench.fig10_frozen_detection"]
    assert len(select(None)) == 7
    with pytest.raises(SystemExit):
        select("11")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_quick_footprint_figure_end_to_end(tmp_path: Path, etcd_binaries: dict[str, str]) -> None:
    out = tmp_path / "results.json"
    env = dict(os.environ)
    etcd_dir = str(Path(next(iter(etcd_binaries.values()))).parent)
    env["PATH"] = etcd_dir + os.pathsep + env.get("PATH", "")
    done = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "8",
                           "--out", str(out)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=170)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    doc = json.loads(out.read_text())
    assert doc["mode"] == "quick" and doc["errors"] == {}
    assert doc["command"].startswith("python -m bench --quick")
    assert doc["machine"]["nproc"] >= 1
    cal = doc["calibration"]            # the host's speed, measured in the same run
    assert 0.0 <= cal["etcd_idle_cores"] < 2.0, cal       # three idle members: well under 2
    assert cal["python_s"] > 0
    assert cal["cgen_us_per_request"] > 0 and cal["cgen_requests"] > 0
    assert f"etcd idle {cal['etcd_idle_cores']} cores" in markdown(doc)
    assert [ld["module"] for ld in doc["figure_load"]] == ["bench.fig8_footprint"]
    rows = doc["figures"]
    assert rows and {r["figure"] for r in rows} == {8}
    names = " ".join(r["name"] for r in rows)
    for what in ("daemon RSS", "daemon CPU", "gateway library added RSS",
                 "gateway library CPU", "etcd writes per second per host",
                 "store-unit probes"):
        assert what in names
    for r in rows:
        assert r["extra"]["calibration"] == cal
        assert isinstance(r["value"], (int, float)) and math.isfinite(r["value"]), r
        assert r["value"] >= 0 and r["unit"] and r["runs"] >= 1
        assert r["met"] in (True, False, None)
        if r["goal"]:
            assert r["met"] is not None
    rss = next(r for r in rows if r["name"].startswith("daemon RSS"))
    assert rss["value"] > 1.0                       # a Python process: more than a megabyte
    assert rss["extra"]["cards_in"] == 8            # steady state was reached with 8 cards
    cpu = next(r for r in rows if r["name"].startswith("daemon CPU"))
    each = cpu["extra"]["cpu_pct_each"]             # one share per window, each process's
    assert len(each["daemon"]) == len(each["witness"]) == cpu["runs"]
    assert cpu["value"] == sorted(each["daemon"])[(cpu["runs"] - 1) // 2]
    units = next(r for r in rows if r["name"].startswith("store-unit probes"))
    assert units["baseline"] > 0 and len(units["extra"]["per_turn_ms"]) == units["runs"]
    # the table went to stdout, one line per row
    assert all(r["name"] in done.stdout for r in rows)


async def test_fleet_reports_a_generation_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """A fleet process sends a generation's applies once all its gateways applied it, each
    with the time it was taken; a gateway that never applies it does not hold the rest back
    beyond ``BATCH_BOUND``."""

    from bench.fleet import BATCH_BOUND, Applied

    applied = Applied(2)
    applied.add(0, 5, 1.25)
    assert capsys.readouterr().out == ""
    applied.add(1, 5, 1.5)
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(x) for x in lines] == [{"kind": "applied_batch", "applied": [
        {"kind": "applied", "gw": 0, "gen": 5, "t": 1.25},
        {"kind": "applied", "gw": 1, "gen": 5, "t": 1.5}]}]
    applied.add(1, 6, 2.0)                      # gateway 0 never applies generation 6
    out = await waits.wait_until(lambda: capsys.readouterr().out, BATCH_BOUND * 20,
                                 "the batch flushed", poll=0.01)
    got = [json.loads(x) for x in out.splitlines()]
    assert [a["gw"] for a in got[0]["applied"]] == [1]
