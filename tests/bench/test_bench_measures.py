"""What the figures' measuring parts count, without a cluster: figure 7's GC passes per call,
figure 4's reading of a ``history`` write, and figure 8's footprint child loading nothing of the
bench's or the harness's own before it measures the library."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from awide_cluster.contract import history_ring as histdoc
from bench.fig1_4_cluster import _history_write
from bench.fig7_faults import HotPath

REPO = Path(__file__).resolve().parents[2]


def test_hot_path_summary_names_the_gc_passes_of_the_slowest_call() -> None:
    hot = HotPath(wall=[0.0001, 0.005, 0.0002, 0.0009],
                  gc_passes=[(2, 0.0048, 1), (0, 0.0001, -1), (1, 0.0003, 3)])
    got = hot.summary()
    assert got["gc_passes"] == 3 and got["gc_full_passes"] == 1
    assert got["calls_with_gc"] == 2
    assert got["max_without_gc_ms"] == 0.2          # calls 1 and 3 had a pass
    assert got["slowest_call_gc"] == [{"generation": 2, "ms": 4.8}]
    assert got["gc_longest_ms"] == 4.8
    clean = HotPath(wall=[0.0001, 0.0004]).summary()
    assert clean["calls_with_gc"] == 0 and clean["slowest_call_gc"] == []
    assert clean["max_without_gc_ms"] == 0.4


def test_a_history_write_names_the_leader_of_its_newest_entry() -> None:
    ring = histdoc.append(histdoc.EMPTY, [
        histdoc.Entry(generation=3, kind="leader", reason="s1 hands over", leader="s1"),
        histdoc.Entry(generation=3, kind="leader", reason="s2 leads", leader="s2")], ring="r1")
    w = _history_write(1.5, SimpleNamespace(value=histdoc.encode(ring), mod_revision=9))
    assert (w.t, w.mod_revision, w.leader, w.drained) == (1.5, 9, "s2", frozenset())


def test_the_footprint_child_loads_only_stdlib_helpers_and_the_library() -> None:
    """Everything ``bench.gwfoot`` imports, at its top or in ``main`` after its base figure, is
    the standard library, ``bench.childio`` (itself stdlib only) or the gateway library."""
    tree = ast.parse((REPO / "bench" / "gwfoot.py").read_text())
    named = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    named |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    ours = {m for m in named if m.split(".")[0] in ("awide_cluster", "awide_gateway_cluster",
                                                     "awide_harness", "bench")}
    assert ours == {"bench.childio", "awide_gateway_cluster"}
    code = ("import json, sys; before = set(sys.modules); import bench.childio; "
            "print(json.dumps(sorted(set(sys.modules) - before)))")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    new = json.loads(out.stdout.strip().splitlines()[-1])
    assert sorted(m for m in new if m.split(".")[0] == "bench") == ["bench", "bench.childio"]
    assert not [m for m in new if m.split(".")[0] in ("awide_cluster", "awide_gateway_cluster",
                                                      "awide_harness", "aiohttp", "pydantic")]
