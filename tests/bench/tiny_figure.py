"""A figure module of one constant row, for the runner's tests (no etcd, no timing)."""

from __future__ import annotations

from bench.common import Context, Row


def run(ctx: Context) -> list[Row]:
    return [Row(0, "tiny figure", 1.0, "ms", 1, stat="value", floor=2.0, ratio=0.5,
                ratio_of="value / floor")]
