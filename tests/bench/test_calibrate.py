"""The host's calibration (``bench/calibrate.py``) is recorded in every row of a figure run
beside it, and in the report's text. Measuring it on a fresh etcd of its own is shown end to
end by ``test_bench_smoke.test_quick_footprint_figure_end_to_end`` (one calibration, not two)."""

from __future__ import annotations

from pathlib import Path

from bench import calibrate
from bench.__main__ import run_figure
from bench.common import Context
from bench.report import markdown


def test_python_workload_is_fixed() -> None:
    assert calibrate.python_workload(1000) == calibrate.python_workload(1000)
    got = calibrate.time_python(rounds=20_000, repeats=3)
    assert got["python_s"] > 0 and got["python_cpu_s"] > 0


def test_calibration_is_recorded_in_a_figures_rows(tmp_path: Path) -> None:
    ctx = Context(quick=True, work=tmp_path, etcd_binary="etcd")
    # a calibration as measure() returns it (without the generator); measured for real in
    # the quick figure's end-to-end test
    cal: dict[str, object] = {
        "loadavg_1m": "0.5", **calibrate.time_python(rounds=20_000, repeats=3),
        "etcd_idle_cores": 0.0123, "cgen_us_per_request": None, "seconds": 5.0}
    errors: dict[str, str] = {}
    loads: list[dict[str, object]] = []
    rows = run_figure("tests.bench.tiny_figure", ctx, cal, errors, loads)
    assert errors == {} and [ld["module"] for ld in loads] == ["tests.bench.tiny_figure"]
    assert rows and all(r.extra["calibration"] == cal for r in rows)
    assert rows[0].to_dict()["extra"]["calibration"]["etcd_idle_cores"] == cal["etcd_idle_cores"]
    doc = {"command": "python -m bench", "date": "d", "elapsed_s": 1.0, "etcd_binary": "etcd",
           "machine": {"nproc": 2, "cpu": "c", "loadavg_start": ["0"], "loadavg_end": ["0"],
                       "python": "3.11"},
           "calibration": cal, "figures": [r.to_dict() for r in rows]}
    assert f"etcd idle {cal['etcd_idle_cores']} cores" in markdown(doc)
