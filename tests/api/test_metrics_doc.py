"""docs/metrics.md lists every metric family the daemon exposes."""

from __future__ import annotations

from pathlib import Path

from awide_cluster.api.metrics import DaemonMetrics

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_metric_is_documented():
    text = (DOCS / "metrics.md").read_text()
    m = DaemonMetrics(host="h", role="storage", version="x")
    for name, kind in m.families():
        shown = {"counter": name + "_total", "info": name + "_info"}.get(kind, name)
        assert f"`{shown}`" in text, f"{shown} ({kind}) is not in docs/metrics.md"
