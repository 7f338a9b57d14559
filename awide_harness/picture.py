"""The dashboard's main panels as one PNG, drawn from a real Prometheus over the demo's tour.

Grafana is not installable here, so ``python -m awide_harness.picture`` (``make picture``)
does what Grafana would do with ``monitoring/dashboard.json``: it starts the embedded cluster
of the demo (``awide_harness.scenario.tour_spec``, default timing; ``--quick``: the demo's
short one), a real Prometheus (``awide_harness.prometheus``) scraping every daemon, gateway
and etcd member each second, runs the demo's tour (a card killed and back, a card added, the
leader daemon killed and restarted, an etcd member frozen...), then asks Prometheus's HTTP API
(``query_range``) for exactly the expressions of the main panels, read from the dashboard
file, and draws them with matplotlib.

The pure part (which panels, their queries and legends, read from the dashboard document) is
at the top and tested without a cluster (tests/test_picture.py); matplotlib is imported only
to draw (the ``picture`` extra).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from awide_harness.prometheus import PROMETHEUS, find_prometheus

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "monitoring" / "dashboard.json"
OUTPUT = ROOT / "docs" / "dashboard.png"
SCRAPE = 1.0                     # seconds between two scrapes, and the query_range step
LEAD_IN = 6.0                    # seconds drawn before the tour's first event
TAIL = 6.0                       # and after its last

# The main panels, by title in the dashboard, in the picture's order: cards and slots, the
# gateways' agreement and staleness, the leader and its changes, etcd's health.
PICTURE_PANELS = (
    "Cards in service (per gateway)",
    "Cards by registry state",
    "Registry generation: gateways and daemons",
    "Registry generations applied by the gateways",
    "Gateway staleness",
    "Leader",
    "Leader changes (per hour)",
    "etcd members with a raft leader",
    "etcd voting members",
    "Slot table",
)
# drawn as the last values of an instant query (a table); every other panel over time
LAST_VALUES = ("Slot table",)


class PictureError(RuntimeError):
    """The dashboard lacks what the picture draws, or the run could not be made."""


@dataclass(frozen=True)
class Query:
    ref: str
    expr: str
    legend: str               # Grafana's legendFormat ("" : the series' labels)


@dataclass(frozen=True)
class Panel:
    title: str
    kind: str                 # Grafana's panel type: timeseries, stat, table
    queries: tuple[Query, ...]


def dashboard_panels(doc: Mapping[str, Any]) -> dict[str, Panel]:
    """Every panel of the dashboard document that has queries, by title (rows' nested panels
    included). A panel without a title or a title used twice is an error naming it."""
    found: dict[str, Panel] = {}

    def walk(panels: Any) -> None:
        if not isinstance(panels, list):
            raise PictureError("dashboard: 'panels' is not a list")
        for p in panels:
            if not isinstance(p, Mapping):
                raise PictureError(f"dashboard: a panel is not an object: {p!r:.80}")
            walk(p.get("panels", []))
            targets = p.get("targets") or []
            if not targets:
                continue
            title = p.get("title")
            if not isinstance(title, str) or not title:
                raise PictureError(f"dashboard: panel id {p.get('id')!r} has queries but no "
                                   "title")
            if title in found:
                raise PictureError(f"dashboard: two panels are titled {title!r}")
            queries = []
            for t in targets:
                expr = t.get("expr") if isinstance(t, Mapping) else None
                if not isinstance(expr, str) or not expr.strip():
                    raise PictureError(f"dashboard: panel {title!r} has a query without expr")
                queries.append(Query(ref=str(t.get("refId", "")), expr=expr,
                                     legend=str(t.get("legendFormat") or "")))
            found[title] = Panel(title=title, kind=str(p.get("type", "")),
                                 queries=tuple(queries))

    walk(doc.get("panels", []))
    return found


def picture_panels(doc: Mapping[str, Any],
                   titles: Sequence[str] = PICTURE_PANELS) -> list[Panel]:
    """The panels the picture draws, in its order; a title the dashboard lacks is an error
    naming it and the titles there are."""
    panels = dashboard_panels(doc)
    missing = [t for t in titles if t not in panels]
    if missing:
        raise PictureError(f"dashboard has no panel titled {', '.join(map(repr, missing))}; "
                           f"its panels: {', '.join(sorted(panels))}")
    return [panels[t] for t in titles]


def load_dashboard(path: Path = DASHBOARD) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise PictureError(f"{path}: not a readable dashboard: {e}") from e
    if not isinstance(doc, dict):
        raise PictureError(f"{path}: not a dashboard object")
    return doc


def for_cluster(expr: str, cluster: str) -> str:
    """The query as Grafana sends it with the ``cluster`` variable set (a regex matcher:
    the name's special characters escaped)."""
    return expr.replace("$cluster", re.escape(cluster).replace("\\", "\\\\"))


_LEGEND = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def legend(fmt: str, labels: Mapping[str, str]) -> str:
    """Grafana's legend: ``{{label}}`` replaced by the series' value of it; without a format,
    the series' labels."""
    if not fmt:
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
        return "{" + inner + "}"
    return _LEGEND.sub(lambda m: labels.get(m.group(1), ""), fmt).strip()


# ---------------------------------------------------------------------------- the run


def record(work: Path, etcd_binary: str | None, prometheus: str, quick: bool,
           say: Callable[[str], None]) -> dict[str, Any]:
    """Start the demo's cluster and Prometheus, run the tour, return what the picture draws:
    every picture query's range (and the last values' instant query), the tour's events."""
    from awide_harness.cluster import EmbeddedCluster
    from awide_harness.ports import reserve_port
    from awide_harness.prometheus import Prometheus, scrape_targets
    from awide_harness.scenario import Tour, tour_spec
    from awide_harness.spec import bounds as derive_bounds
    from awide_harness.waits import wait_until_sync

    panels = picture_panels(load_dashboard())
    spec = tour_spec(quick, etcd_binary)
    with EmbeddedCluster(work / "cluster", spec) as c:
        targets = scrape_targets(c)
        instances = dict(zip(targets["awide-cluster"], c.hosts, strict=True))
        prom = Prometheus(work / "prometheus", targets, spec.cluster, prometheus, reserve_port(),
                          interval=SCRAPE)
        try:
            wait_until_sync(prom.ready, 30.0, "Prometheus scrapes every target", poll=0.1)
            exprs = [for_cluster(q.expr, spec.cluster) for p in panels for q in p.queries]
            wait_until_sync(lambda: all(prom.query(e) for e in exprs), 30.0,
                            "every picture query returns series", poll=0.1)
            say(f"Prometheus {prom.url} scrapes {sum(map(len, targets.values()))} targets; "
                f"leader {c.leader_host()}")
            start = time.time()
            time.sleep(LEAD_IN)      # not a wait: the quiet cluster before the tour, drawn
            tour = Tour(c, derive_bounds(spec.timing), say)
            offset = time.time() - time.monotonic()
            began = tour.begin + offset
            outcomes = tour.run()
            time.sleep(TAIL)         # not a wait: the cluster after the tour, drawn
            end = time.time()
            ranges: dict[str, Any] = {}
            last: dict[str, Any] = {}
            for p in panels:
                for q in p.queries:
                    e = for_cluster(q.expr, spec.cluster)
                    ranges[q.expr] = prom.query_range(e, start, end)
                    if p.title in LAST_VALUES:
                        last[q.expr] = prom.query(e, at=end)
            version = prom.version()
        finally:
            prom.stop()
        events = [{"name": o.name, "what": o.what, "at": began + o.at, "ok": o.ok,
                   "extra": dict(o.extra)} for o in outcomes]
        return {"cluster": spec.cluster, "start": start, "end": end, "began": began,
                "events": events, "ranges": ranges, "last": last, "instances": instances,
                "prometheus": version, "etcd": c.etcd.version,
                "timing": "quick" if quick else "default",
                "hosts": list(c.hosts), "gateways": list(c.gateway_ids)}


# ---------------------------------------------------------------------------- drawing

EVENT_LABELS = {
    "card_sick": "card store killed", "card_back": "card store back",
    "card_added": "card added", "leader_killed": "leader daemon killed",
    "leader_restarted": "old leader restarted", "etcd_member_frozen": "etcd member frozen",
    "card_sick_member_frozen": "card killed (member frozen)",
    "etcd_member_thawed": "member thawed, card back",
}


def _series(result: list[dict[str, Any]], t0: float) -> list[tuple[dict[str, str],
                                                                   list[float], list[float]]]:
    """(labels, seconds since t0, values) per series, a gap (NaN) where a scrape is missing."""
    out = []
    for r in result:
        xs: list[float] = []
        ys: list[float] = []
        prev = None
        for ts, v in r.get("values", []):
            ts = float(ts)
            if prev is not None and ts - prev > SCRAPE * 1.5:
                xs.append(prev - t0 + SCRAPE)
                ys.append(float("nan"))
            xs.append(ts - t0)
            ys.append(float(v))
            prev = ts
        out.append((dict(r.get("metric", {})), xs, ys))
    return out


def draw(data: Mapping[str, Any], out: Path, dashboard: Mapping[str, Any]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = picture_panels(dashboard)
    t0 = float(data["began"])
    x0, x1 = float(data["start"]) - t0, float(data["end"]) - t0
    events = [(float(e["at"]) - t0, EVENT_LABELS.get(e["name"], e["name"]))
              for e in data["events"]]
    instances: Mapping[str, str] = data.get("instances", {})
    began = datetime.fromtimestamp(t0, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

    cols, row_h, head = 2, 3.0, 2.1
    rows = (len(panels) + cols - 1) // cols
    height = row_h * rows + head
    fig = plt.figure(figsize=(15, height), dpi=72)
    gs = fig.add_gridspec(rows, cols, hspace=0.5, wspace=0.16, left=0.06, right=0.985,
                          top=1 - head / height, bottom=0.5 / height)
    fig.suptitle("awide-cluster dashboard, main panels, over the demo's tour", fontsize=16,
                 fontweight="bold", y=1 - 0.12 / height, va="top")
    said = [f"({i + 1}) {label} at {x:.0f} s" for i, (x, label) in enumerate(events)]
    half = (len(said) + 1) // 2
    story = "   ".join(said[:half]) + "\n" + "   ".join(said[half:])
    fig.text(0.5, 1 - 0.55 / height,
             f"Each panel's queries read from monitoring/dashboard.json and asked of a real "
             f"Prometheus {data.get('prometheus', '')} (query_range, 1 s step)\nscraping "
             f"the demo's cluster '{data['cluster']}': etcd {data.get('etcd', '?')} x3, daemons "
             f"{', '.join(data.get('hosts', []))}, gateways "
             f"{', '.join(data.get('gateways', []))}. Drawn by awide_harness/picture.py "
             f"(make picture) with matplotlib, not a Grafana screenshot.\nThe tour began "
             f"{began} ({data.get('timing', 'quick')} timing); dotted lines: its events\n"
             + story,
             ha="center", va="top", fontsize=10, linespacing=1.5)

    for i, p in enumerate(panels):
        ax = fig.add_subplot(gs[i // cols, i % cols])
        if p.title in LAST_VALUES:
            _table_panel(ax, p, data, float(data["end"]))
            continue
        _timed_panel(ax, p, data, t0, instances)
        ax.set_xlim(x0, x1)
        last_x, level = -1e9, 0
        for n, (x, _) in enumerate(events):
            level = level + 1 if x - last_x < (x1 - x0) / 40 else 0
            last_x = x
            ax.axvline(x, color="0.5", linestyle=":", linewidth=1)
            ax.annotate(str(n + 1), (x, 0.0), xycoords=("data", "axes fraction"),
                        xytext=(2, 3 + 9 * level), textcoords="offset points", fontsize=8,
                        color="0.25")
        ax.set_xlabel("seconds since the tour began", fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=8)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=72)
    plt.close(fig)


def _timed_panel(ax: Any, p: Panel, data: Mapping[str, Any], t0: float,
                 instances: Mapping[str, str]) -> None:
    from matplotlib.ticker import MaxNLocator

    note = {"stat": " (stat, over time)", "table": " (table, over time)"}
    ax.set_title(p.title + note.get(p.kind, ""), fontsize=11, fontweight="bold", loc="left")
    if p.title == "Leader":
        _leader_timeline(ax, p, data, t0, instances)
        return
    values: list[float] = []
    for q in p.queries:
        for labels, xs, ys in _series(data["ranges"].get(q.expr, []), t0):
            name = legend(q.legend, labels)
            if labels.get("instance") in instances:
                name = name.replace(labels["instance"], instances[labels["instance"]])
            ax.step(xs, ys, where="post", label=name, linewidth=1.6)
            values.extend(y for y in ys if y == y)
    if not values:
        ax.text(0.5, 0.5, "no series", transform=ax.transAxes, ha="center")
        return
    lo, hi = min(values), max(values)
    span = (hi - lo) or max(1.0, abs(hi))
    ax.set_ylim(min(0.0, lo - 0.05 * span), hi + 0.45 * span)   # room for the legend
    if all(float(v).is_integer() for v in values):
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    n = len(ax.get_lines())
    ax.legend(fontsize=8, loc="upper center", ncol=min(n, 4), framealpha=0.85)


def _leader_timeline(ax: Any, p: Panel, data: Mapping[str, Any], t0: float,
                     instances: Mapping[str, str]) -> None:
    """The Leader table (the instance whose awide_is_leader is 1) as bars over time."""
    rows: dict[str, list[float]] = {h: [] for h in instances.values()}
    for q in p.queries:
        for labels, xs, ys in _series(data["ranges"].get(q.expr, []), t0):
            host = instances.get(labels.get("instance", ""), labels.get("instance", "?"))
            rows.setdefault(host, []).extend(
                x for x, y in zip(xs, ys, strict=True) if y == y)
    names = sorted(rows, reverse=True)
    for y, name in enumerate(names):
        ax.broken_barh([(x, SCRAPE) for x in rows[name]], (y - 0.3, 0.6), color="tab:green",
                       label="leads (awide_is_leader == 1)" if y == 0 else None)
    ax.set_yticks(range(len(names)), [f"daemon {n}" for n in names], fontsize=9)
    ax.set_ylim(-0.6, len(names) + 0.4)
    ax.legend(fontsize=8, loc="upper center", framealpha=0.85)


def _table_panel(ax: Any, p: Panel, data: Mapping[str, Any], end: float) -> None:
    at = datetime.fromtimestamp(end, UTC).strftime("%H:%M:%S UTC")
    ax.set_title(f"{p.title} (table: last values, {at})", fontsize=11, fontweight="bold",
                 loc="left")
    ax.axis("off")
    result = [r for q in p.queries for r in data["last"].get(q.expr, [])]
    keys = sorted({k for r in result for k in r["metric"]})
    order = ("slot", "card", "card_name", "host")
    cols = [k for k in order if k in keys] + [k for k in keys if k not in order]

    def sort_key(r: dict[str, Any]) -> tuple[int, str]:
        slot = r["metric"].get("slot", "")
        return (int(slot) if slot.isdigit() else 1 << 30, json.dumps(r["metric"]))

    cells = [[r["metric"].get(k, "") for k in cols] + [r["value"][1]]
             for r in sorted(result, key=sort_key)]
    if not cells:
        ax.text(0.5, 0.5, "no series", transform=ax.transAxes, ha="center")
        return
    table = ax.table(cellText=cells, colLabels=cols + ["value"],
                     loc="upper center", cellLoc="left")
    table.auto_set_font_size(False)
    table.set_fontsize(9)
    table.scale(1, 1.3)


# ---------------------------------------------------------------------------- command


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m awide_harness.picture",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--out", type=Path, default=OUTPUT, help="the PNG (default: %(default)s)")
    ap.add_argument("--data", type=Path, default=None,
                    help="also write the queries' results here (JSON)")
    ap.add_argument("--from-data", type=Path, default=None,
                    help="draw from results written by --data; start nothing")
    ap.add_argument("--quick", action="store_true",
                    help="the tour's short timings (as the demo's --quick): events closer")
    ap.add_argument("--etcd", default=None, help="the etcd program (default: as the demo)")
    ap.add_argument("--prometheus", default=None,
                    help=f"the Prometheus program (default: {PROMETHEUS}, or on PATH)")
    args = ap.parse_args(argv)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        dashboard = load_dashboard()
        if args.from_data:
            data = json.loads(args.from_data.read_text())
        else:
            binary = args.prometheus or find_prometheus()
            if not binary:
                raise PictureError("no Prometheus: install Debian's prometheus (`make deps` as "
                                   "root) or pass --prometheus PATH")
            with tempfile.TemporaryDirectory(prefix="awide-picture-") as work:
                data = record(Path(work), args.etcd, binary, args.quick, say)
            if args.data:
                args.data.write_text(json.dumps(data) + "\n")
        draw(data, args.out, dashboard)
    except (RuntimeError, OSError, ValueError) as e:    # PictureError, the cluster's errors
        say(f"picture: {e}")
        return 1
    bad = [e["name"] for e in data["events"] if not e["ok"]]
    say(f"picture: {args.out} ({args.out.stat().st_size // 1024} KB), {len(data['events'])} "
        f"tour events{'; NOT converged: ' + ', '.join(bad) if bad else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
