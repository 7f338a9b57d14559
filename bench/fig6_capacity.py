"""Figure 6: how many gateways a 3-member etcd on this machine carries, and at what cost.

**The climb** uses simulated gateways that make a gateway's whole request mix (a change check
turn per second, linearizable every 10th turn, serializable otherwise unless the watch proved
the view fresh within 1.5 turns (then no read), a watch of the registry, a lease keepalive
every ttl/3, ttl the gateway config's default ``lease_ttl``: ``bench.cgen``)
over raw keep-alive connections, with a client lean enough that etcd, not the generator, is
measured: the C generator (``bench/leanload.c``, built at run
time by ``bench.cgen``) when a C compiler is installed, else the Python one
(``bench.leanload``); which one ran and its own CPU per request are in the rows. They are
split over a few load processes. The count steps up; a step is held when, over its measuring
window, the p99 poll latency is <= 50 ms, no poll failed or took longer than the 0.5 s bound,
and >= 95 % of the polls due (turns the watch did not prove fresh) were made (a load
generator that falls behind would otherwise
look fast). A step not held is measured once more (other work on this shared machine causes
short stalls); the first step not held twice ends the climb, and so does the time budget of
the climb.

**Side by side**, at one fixed count, in one run: etcd CPU seconds (utime+stime of the three
members, from /proc, net of etcd's idle CPU measured just before) per gateway-second for the
whole mix and for the naive full-read poller (a linearizable read of the whole registry each
second, the same keepalive, no watch); with the C generator, the Python one once more on the
same mix, for its CPU per request beside the C one's; then the library's own poll
(``bench.pollers``: ``Follower.poll()`` on an ``EtcdStore``) against the naive fetch +
decode, per 1,000 polls, with the library's client CPU.

**Part by part** (``python -m bench --only 6 --mix-parts``, instead of the above): at one
fixed count (1,000 gateways), etcd CPU per gateway-second of the poll alone, the watch alone,
the keepalive alone, the whole mix with every turn's poll made (as before the watch proved
freshness), the whole mix (the generators' ``parts``) and the whole mix with a 90 s gateway
lease (a keepalive every 30 s instead of every 10 s), each with fresh load processes against
the same 3-member etcd (progress notifications at the deploy's interval, 1.4 s); the poll
alone and the watch alone through etcd's gRPC API instead of its JSON gateway
(``bench.grpcload``, when grpcio is installed), which tells the JSON translation's share from
etcd's own cost per message; then the watch alone and the whole mix against a 3-member etcd
whose members notify progress every 1 s, and against one notifying every 10 s. Rows without a
goal; the parts need not add up to the whole exactly (each window has its own noise).
"""

from __future__ import annotations

import asyncio
import base64
import json
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

from awide_cluster.config.daemon import ETCD_PROGRESS_NOTIFY
from awide_harness.registry_writer import RegistryWriter
from bench import cgen
from bench.common import (
    WRITTEN_AT,
    Context,
    Row,
    cpu_seconds,
    etcd_cpu,
    etcd_settings,
    make_dir_cards,
    ms,
    pct,
    registry_revision,
    start_etcd,
    store_for,
)
from bench.loadset import LoadSet, Window, sleep_until

P99_GOAL = 0.050
BOUND = 0.5
MIX = ("poll", "watch", "keepalive", "proof")
# (label, parts, gateway lease TTL or None for the gateway config's default)
PARTS: tuple[tuple[str, tuple[str, ...], int | None], ...] = (
    ("poll only", ("poll",), None), ("watch only", ("watch",), None),
    ("keepalive only", ("keepalive",), None),
    ("whole mix, every turn polled", ("poll", "watch", "keepalive"), None),
    ("whole mix", MIX, None),
    ("whole mix, 90 s lease", MIX, 90))
GRPC_PARTS = ("poll", "watch")


async def _publish(endpoints: tuple[str, ...], cluster: str, ctx: Context) -> int:
    store = store_for(endpoints, cluster)
    try:
        w = RegistryWriter(store, cluster, make_dir_cards(ctx.work / "cards6", 8),
                           written_at=WRITTEN_AT)
        await w.publish()
        assert w.reg is not None
        from awide_cluster.contract.registry import encode
        return len(encode(w.reg))
    finally:
        await store.close()


def _gen_us(records: list[dict[str, Any]]) -> float | None:
    """The load generator's own CPU per request over the climb's windows (microseconds)."""
    req = sum(r.get("requests", 0) for r in records)
    cpu = sum(r.get("gen_cpu_s", 0.0) for r in records)
    return round(cpu / req * 1e6, 1) if req else None


def _measure(load: LoadSet, etcd: Any, warmup: float, measure: float) -> tuple[Window, float]:
    time.sleep(warmup)              # not a wait: the load warms up
    load.mark()
    t0 = time.monotonic()
    c0, e0 = load.cpu(), etcd_cpu(etcd)
    sleep_until(t0 + measure)
    t1 = time.monotonic()
    e1 = etcd_cpu(etcd)
    return load.window(t0, t1, c0), e1 - e0


def _per_gateway(load: LoadSet, etcd: Any, idle_rate: float, count: int, kind: str,
                 warmup: float, measure: float, windows: int = 1) -> dict[str, Any]:
    """``count`` gateways of ``kind``: etcd CPU (net of idle) per gateway-second, poll latency,
    and the generator's own CPU per request, over ``windows`` windows one after the other
    after one warm-up: etcd's CPU is the median of the windows' (each listed; one window's
    value varies by a fifth or more between windows), the counts are of all windows."""
    load.set(count, kind)
    per_window: list[float] = []
    polls = requests = failed = 0
    gen_cpu = gen_sys = 0.0
    seconds: list[float] = []
    generators: set[str] = set()
    spans = 0.0
    for k in range(windows):
        win, etcd_s = _measure(load, etcd, warmup if k == 0 else 0.0, measure)
        span = win.t1 - win.t0
        spans += span
        net = max(0.0, etcd_s - idle_rate * span)
        per_window.append(round(net / span / count * 1000, 4))
        polls, requests, failed = polls + win.polls, requests + win.requests, failed + win.failed
        gen_cpu, gen_sys = gen_cpu + win.gen_cpu_s, gen_sys + win.gen_sys_s
        seconds += win.seconds
        generators |= set(win.generators)
    return {"gateways": count, "polls": polls, "requests": requests,
            "etcd_cpu_ms_per_gateway_s": round(statistics.median(per_window), 4),
            "etcd_cpu_ms_per_gateway_s_windows": per_window,
            "p99_ms": ms(pct(seconds, 99)), "failed": failed,
            "generator_us_per_request": round(gen_cpu / max(1, requests) * 1e6, 1),
            "generator_kernel_share": round(gen_sys / gen_cpu, 2) if gen_cpu else None,
            "generator_cpu_ms_per_gateway_s": round(gen_cpu / max(1e-9, spans) / count * 1000, 4),
            "generators": sorted(generators)}


def _step_record(count: int, win: Window, etcd_s: float) -> dict[str, Any]:
    span = win.t1 - win.t0
    # a poll is due at every turn the watch did not prove fresh: made, or not made because the
    # gateway was behind (a load generator that falls behind would otherwise look fast)
    due = win.polls + win.behind
    lat = win.seconds
    p99 = pct(lat, 99)
    made = win.polls / due if due else 0.0
    held = (p99 is not None and p99 <= P99_GOAL and win.failed == 0 and win.over == 0
            and made >= 0.95)
    return {"gateways": count, "polls": win.polls, "polls_per_s": round(win.polls / span, 1),
            "made_of_due": round(made, 3), "p50_ms": ms(pct(lat, 50)), "p99_ms": ms(p99),
            "max_ms": ms(max(lat) if lat else None), "failed": win.failed, "over_bound": win.over,
            "load_lag_max_ms": win.late_ms_max, "late_starts_over_100ms": win.late_over_100ms,
            "etcd_cpu_cores": round(etcd_s / span, 3),
            "load_cpu_cores": round(win.load_cpu_s / span, 3), "held": held,
            "requests": win.requests, "gen_cpu_s": round(win.gen_cpu_s, 3),
            "skipped": win.skipped, "proven": win.proven, "behind": win.behind}


def _prepare(ctx: Context, etcd: Any, cluster: str) -> tuple[int, float, Any, dict[str, Any]]:
    """The registry published, etcd's idle CPU rate measured, the generator chosen: the registry's
    size in bytes, etcd's idle cores, the generator and its spec."""
    doc_bytes = asyncio.run(_publish(etcd.endpoints, cluster, ctx))
    e0 = etcd_cpu(etcd)
    time.sleep(2.0)                 # not a wait: the idle CPU window
    idle_rate = (etcd_cpu(etcd) - e0) / 2.0
    rev = asyncio.run(registry_revision(etcd.endpoints, cluster))
    gen = cgen.choose(ctx.work / "cgen")
    return doc_bytes, idle_rate, gen, cgen.spec(cluster, rev)


def _parts_on(ctx: Context, progress_notify: float,
              cases: tuple[tuple[str, tuple[str, ...], int | None], ...],
              count: int, warmup: float, measure: float, windows: int,
              grpc: bool = False) -> list[Row]:
    """One 3-member etcd notifying watch progress every ``progress_notify`` seconds: etcd CPU
    per gateway-second of ``count`` gateways making each case's parts of the mix."""
    etcd = start_etcd(ctx, f"etcd6p{progress_notify:g}", progress_notify_interval=progress_notify)
    cluster = f"parts{uuid.uuid4().hex[:6]}"
    rows: list[Row] = []
    try:
        doc_bytes, idle_rate, gen, spec = _prepare(ctx, etcd, cluster)
        for label, parts, ttl in cases:
            case_spec = {**spec, "parts": list(parts)}
            if ttl is not None:
                case_spec["lease_ttl"] = ttl
            load = LoadSet(etcd.endpoints, cluster, procs=2, log_dir=ctx.work / "logs",
                           name=f"parts6-{'-'.join(parts)}-", module="bench.leanload",
                           seed=ctx.seed, extra=case_spec, program=gen.program)
            try:
                got = _per_gateway(load, etcd, idle_rate, count, "mix", warmup, measure,
                                   windows)
            finally:
                load.close()
            ctx.say(f"  {label}, progress notify every {progress_notify:g} s "
                    f"({gen.name} generator): {got}")
            name = f"etcd CPU per gateway-second, mix part: {label}"
            if progress_notify != ETCD_PROGRESS_NOTIFY:
                name += f" (progress notify every {progress_notify:g} s)"
            rows.append(Row(6, name, got["etcd_cpu_ms_per_gateway_s"], "ms", count,
                            stat="value",
                            note=f"{count} gateways, parts {', '.join(parts)}; members notify "
                                 f"watch progress every {progress_notify:g} s; median of "
                                 f"{windows} windows of {measure:g} s; etcd idle "
                                 f"{idle_rate:.3f} cores subtracted",
                            extra={**got, "parts": list(parts), "generator": gen.name,
                                   "progress_notify_interval_s": progress_notify,
                                   "gateway_lease_ttl_s": case_spec["lease_ttl"],
                                   "etcd": etcd_settings(etcd), "registry_bytes": doc_bytes,
                                   "etcd_idle_cpu_cores": round(idle_rate, 3)}))
        if grpc:
            rows += _grpc_parts(ctx, etcd, idle_rate, spec, count, warmup, measure, windows)
    finally:
        etcd.stop()
    return rows


def _grpc_parts(ctx: Context, etcd: Any, idle_rate: float, spec: dict[str, Any], count: int,
                warmup: float, measure: float, windows: int) -> list[Row]:
    """The poll alone and the watch alone through etcd's gRPC API (``bench.grpcload``), for
    the cost of the JSON gateway's translation beside the rows above; none without grpcio."""
    try:
        import grpc  # noqa: F401
    except ImportError:
        ctx.say("  gRPC comparison not measured: grpcio is not installed (the test extra)")
        return []
    key = base64.b64decode(spec["registry_key_b64"]).decode()
    rows: list[Row] = []
    for part in GRPC_PARTS:
        got = _grpc_window(etcd, idle_rate, {
            "endpoints": list(etcd.endpoints), "key": key, "count": count, "part": part,
            "min_mod_revision": spec["registry_mod_revision"] + 1, "seed": ctx.seed},
            warmup, measure, windows)
        ctx.say(f"  {part} only through the gRPC API: {got}")
        rows.append(Row(6, f"etcd CPU per gateway-second, mix part: {part} only (gRPC API)",
                        got["etcd_cpu_ms_per_gateway_s"], "ms", count, stat="value",
                        note=f"{count} gateways, {part} through etcd's gRPC API instead of its "
                             "JSON gateway (bench.grpcload; the library does not use it); "
                             f"median of {windows} windows of {measure:g} s; "
                             f"etcd idle {idle_rate:.3f} cores subtracted",
                        extra={**got, "api": "grpc", "part": part, "etcd": etcd_settings(etcd),
                               "etcd_idle_cpu_cores": round(idle_rate, 3)}))
    return rows


def _grpc_window(etcd: Any, idle_rate: float, gspec: dict[str, Any], warmup: float,
                 measure: float, windows: int) -> dict[str, Any]:
    """``bench.grpcload`` started and warmed up, then ``windows`` windows one after the other:
    etcd's CPU per gateway-second the median of theirs, the generator's last counts."""
    proc = subprocess.Popen([sys.executable, "-m", "bench.grpcload", json.dumps(gspec)],
                            stdout=subprocess.PIPE, text=True)
    per_window: list[float] = []
    gen_cpu = spans = 0.0
    try:
        assert proc.stdout is not None
        start_by = time.monotonic() + 60.0
        line = ""
        while line.strip() != "ready":
            line = proc.stdout.readline()
            if not line or time.monotonic() > start_by:
                raise RuntimeError(f"gRPC generator did not start: {line!r}")
        time.sleep(warmup)          # not a wait: the load warms up
        for _ in range(windows):
            t0 = time.monotonic()
            e0, g0 = etcd_cpu(etcd), cpu_seconds(proc.pid)
            sleep_until(t0 + measure)
            t1 = time.monotonic()
            e1, g1 = etcd_cpu(etcd), cpu_seconds(proc.pid)
            net = max(0.0, (e1 - e0) - idle_rate * (t1 - t0))
            per_window.append(round(net / (t1 - t0) / gspec["count"] * 1000, 4))
            gen_cpu, spans = gen_cpu + (g1 - g0), spans + (t1 - t0)
    finally:
        proc.terminate()
        try:
            rest, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            rest, _ = proc.communicate()
    last = json.loads([x for x in rest.splitlines() if x.startswith("{")][-1])
    return {"gateways": gspec["count"], "answers_total": last["answers"],
            "failed": last["failed"], "p99_ms": last["p99_ms"],
            "etcd_cpu_ms_per_gateway_s": round(statistics.median(per_window), 4),
            "etcd_cpu_ms_per_gateway_s_windows": per_window,
            "generator_cpu_cores": round(gen_cpu / spans, 3)}


def decompose(ctx: Context) -> list[Row]:
    """What each part of a gateway's mix costs etcd at the deploy's progress notification
    interval, and the watch and the whole mix at 1 s and at 10 s."""
    count, warmup, measure, windows = (100, 1.5, 2.5, 1) if ctx.quick else (1000, 3.0, 8.0, 3)
    rows = _parts_on(ctx, ETCD_PROGRESS_NOTIFY, PARTS, count, warmup, measure, windows,
                     grpc=True)
    for other in (1.0, 10.0):
        rows += _parts_on(ctx, other, (PARTS[1], PARTS[4]), count, warmup, measure, windows)
    return rows


def run(ctx: Context) -> list[Row]:
    if ctx.mix_parts:
        return decompose(ctx)
    if ctx.quick:
        steps, warmup, measure, procs, budget = [100, 250], 1.5, 2.5, 2, 15.0
        cmp_count, cmp_measure, mix_count, cmp_windows = 100, 2.5, 100, 1
    else:
        steps = [250, 500, 1000, 1500, 2000, 2500, 3000, 4000, 5000, 6000, 7000, 8000]
        warmup, measure, procs, budget = 3.0, 8.0, 2, 300.0
        cmp_count, cmp_measure, mix_count, cmp_windows = 400, 8.0, 1000, 5
    etcd = start_etcd(ctx, "etcd6")
    cluster = f"cap{uuid.uuid4().hex[:6]}"
    load: LoadSet | None = None
    rows: list[Row] = []
    try:
        doc_bytes, idle_rate, gen, spec = _prepare(ctx, etcd, cluster)
        ctx.say(f"  load generator: {gen.name}"
                + (f" (built with {gen.compiler})" if gen.compiler else " (no C compiler)"))
        load = LoadSet(etcd.endpoints, cluster, procs=procs, log_dir=ctx.work / "logs",
                       name="lean6-", module="bench.leanload", seed=ctx.seed, extra=spec,
                       program=gen.program)
        # etcd CPU per gateway-second: the whole mix against the naive full-read poller, on the
        # fresh etcd (after the climb, its thousands of gateways' leases expire for a TTL)
        per_gw: dict[str, dict[str, Any]] = {}
        for kind in ("mix", "naive"):
            load.set(0, kind)
            per_gw[kind] = _per_gateway(load, etcd, idle_rate, mix_count, kind, warmup,
                                        cmp_measure, cmp_windows)
            ctx.say(f"  {kind} ({gen.name} generator): {per_gw[kind]}")
        m, nv0 = per_gw["mix"], per_gw["naive"]
        cmp_row = Row(6, "etcd CPU per gateway-second, whole mix (vs naive full-read poller)",
                      m["etcd_cpu_ms_per_gateway_s"], "ms", m["polls"], stat="value",
                      baseline=nv0["etcd_cpu_ms_per_gateway_s"],
                      ratio=(round(nv0["etcd_cpu_ms_per_gateway_s"]
                                   / m["etcd_cpu_ms_per_gateway_s"], 2)
                             if m["etcd_cpu_ms_per_gateway_s"] else None),
                      # the goal is on the ratio: the absolute figure moves with the host
                      # (twice as high on a day the calibration ran twice as slow)
                      ratio_of="naive / mix", goal="naive / mix >= 2",
                      met=(m["etcd_cpu_ms_per_gateway_s"] > 0
                           and nv0["etcd_cpu_ms_per_gateway_s"]
                           >= 2.0 * m["etcd_cpu_ms_per_gateway_s"]),
                      note=f"{mix_count} gateways, median of {cmp_windows} windows of "
                           f"{cmp_measure:g} s each; load generator ({gen.name}) "
                           f"{m['generator_us_per_request']} us (mix) and "
                           f"{nv0['generator_us_per_request']} us (naive) of CPU per request",
                      extra={"mix": m, "naive": nv0, "generator": gen.name,
                             "absolute_goal": "<= 0.3 ms on this box on a quiet day",
                             "absolute_met": m["etcd_cpu_ms_per_gateway_s"] <= 0.3})
        load.set(0, "mix")
        records: list[dict[str, Any]] = []
        climb_end = time.monotonic() + budget
        for count in steps:
            if time.monotonic() > climb_end:
                ctx.say(f"  climb stopped by its time budget ({budget:g} s) before {count}")
                break
            load.set(count, "mix")
            for attempt in (1, 2):
                win, etcd_s = _measure(load, etcd, warmup if attempt == 1 else 0.5, measure)
                rec = _step_record(count, win, etcd_s)
                rec["attempt"] = attempt
                records.append(rec)
                ctx.say(f"  {count} gateways: p99 {rec['p99_ms']} ms, max {rec['max_ms']} ms, "
                        f"{rec['polls_per_s']} polls/s, failed {rec['failed']}, over "
                        f"{rec['over_bound']}, etcd {rec['etcd_cpu_cores']} cores, load "
                        f"{rec['load_cpu_cores']} cores -> "
                        f"{'held' if rec['held'] else 'NOT held'}")
                if rec["held"]:
                    break
            if not rec["held"]:
                break
        held = [r["gateways"] for r in records if r["held"]]
        largest = max(held) if held else 0
        failing = records[-1] if records and not records[-1]["held"] else None
        if failing is None:
            why = (f"every step held up to {records[-1]['gateways'] if records else 0} "
                   f"(the climb stops at {steps[-1]} or its time budget)")
        else:
            why = (f"first step not held twice: {failing['gateways']} gateways, p99 "
                   f"{failing['p99_ms']} ms, {failing['failed']} failed, "
                   f"{failing['over_bound']} over 0.5 s, {failing['made_of_due']:.0%} of polls "
                   f"made; etcd used {failing['etcd_cpu_cores']} cores, the load processes "
                   f"{failing['load_cpu_cores']} cores (2 cores in all)")
        gen_us = _gen_us(records)
        cap = Row(6, "capacity: gateways (whole mix) held (p99 <= 50 ms, none over 0.5 s)",
                  float(largest), "gateways", len(records), stat="value", goal=">= 5000",
                  met=largest >= 5000, note=why + f"; load generator ({gen.name}) {gen_us} us "
                  "of CPU per request",
                  extra={"steps": records, "load_processes": procs, "warmup_s": warmup,
                         "generator": gen.name, "generator_us_per_request": gen_us,
                         "gateway_lease_ttl_s": spec["lease_ttl"],
                         "measure_s": measure, "etcd": etcd_settings(etcd),
                         "registry_bytes": doc_bytes,
                         "etcd_idle_cpu_cores": round(idle_rate, 3)})
        rows.append(cap)

        rows.append(cmp_row)
        load.close()

        # the generator's own CPU per request on the same mix: the C one against the Python one
        py: dict[str, Any] | None = None
        if gen.name == "c":
            load = LoadSet(etcd.endpoints, cluster, procs=procs, log_dir=ctx.work / "logs",
                           name="py6-", module="bench.leanload", seed=ctx.seed, extra=spec)
            py = _per_gateway(load, etcd, idle_rate, mix_count, "mix", warmup, cmp_measure)
            ctx.say(f"  mix (python generator): {py}")
            load.close()
        gen_now = m["generator_us_per_request"]
        # the generator's share of what it measures: its CPU per gateway-second over etcd's,
        # same windows (a request is a poll or a keepalive; most of its work now is reading
        # the watch streams, which are not requests, so per request is information only)
        gen_gw = m["generator_cpu_ms_per_gateway_s"]
        etcd_gw = m["etcd_cpu_ms_per_gateway_s"]
        share = round(gen_gw / etcd_gw, 3) if etcd_gw else None
        rows.append(Row(6, f"load generator CPU per gateway-second / etcd's, whole mix "
                           f"({gen.name})", share, "ratio", m["gateways"], stat="ratio",
                        goal="<= 0.25", met=share is not None and share <= 0.25,
                        note=f"the generator {gen_gw} ms of CPU per gateway-second against "
                             f"etcd's {etcd_gw} ms (net of idle), {mix_count} gateways in "
                             f"{procs} processes, the same windows",
                        extra={"generator": gen.name, "generator_cpu_ms_per_gateway_s": gen_gw,
                               "etcd_cpu_ms_per_gateway_s": etcd_gw}))
        rows.append(Row(6, f"load generator CPU per request, whole mix ({gen.name})", gen_now,
                        "us", m["requests"], stat="value",
                        baseline=None if py is None else py["generator_us_per_request"],
                        ratio=(round(py["generator_us_per_request"] / gen_now, 2)
                               if py is not None and gen_now else None),
                        ratio_of="python / c" if py is not None else "",
                        note=f"{mix_count} gateways in {procs} processes, "
                             f"{m['generator_kernel_share']} of it in the kernel; "
                             + (f"baseline: the Python generator on the same mix (p99 "
                                f"{py['p99_ms']} ms, etcd {py['etcd_cpu_ms_per_gateway_s']} ms "
                                f"per gateway-second)" if py is not None
                                else "no C compiler: the Python generator ran"),
                        extra={"generator": gen.name, "compiler": gen.compiler,
                               "mix": m, "python_mix": py}))
        load = LoadSet(etcd.endpoints, cluster, procs=procs, log_dir=ctx.work / "logs",
                       name="poll6-")

        # the library's own poll, cheap change check vs naive full fetch + decode
        costs: dict[str, dict[str, Any]] = {}
        for kind in ("follower", "naive"):
            load.set(cmp_count, kind)
            win, etcd_s = _measure(load, etcd, warmup, cmp_measure)
            span = win.t1 - win.t0
            net = max(0.0, etcd_s - idle_rate * span)
            n = max(1, win.polls)
            costs[kind] = {"polls": win.polls, "etcd_cpu_s": round(etcd_s, 3),
                           "etcd_cpu_s_net": round(net, 3),
                           "etcd_cpu_s_per_1000": round(net / n * 1000, 4),
                           "client_cpu_s_per_1000": round(win.load_cpu_s / n * 1000, 4),
                           "p99_ms": ms(pct(win.seconds, 99)), "failed": win.failed}
            ctx.say(f"  {kind}: {costs[kind]}")
        f, nv = costs["follower"], costs["naive"]
        ratio = (nv["etcd_cpu_s_per_1000"] / f["etcd_cpu_s_per_1000"]
                 if f["etcd_cpu_s_per_1000"] else None)
        rows.append(Row(6, "etcd CPU per 1,000 polls: gateway poll (changed since?)",
                        f["etcd_cpu_s_per_1000"], "CPU s", f["polls"], stat="value",
                        baseline=nv["etcd_cpu_s_per_1000"],
                        ratio=None if ratio is None else round(ratio, 2),
                        ratio_of="naive / gateway poll",
                        note=f"{cmp_count} pollers; client CPU {f['client_cpu_s_per_1000']} s "
                             f"per 1,000 polls",
                        extra={"gateway_poll": f, "naive": nv, "pollers": cmp_count}))
        rows.append(Row(6, "etcd CPU per 1,000 polls: naive full fetch + decode",
                        nv["etcd_cpu_s_per_1000"], "CPU s", nv["polls"], stat="value",
                        note=f"{cmp_count} pollers; client CPU {nv['client_cpu_s_per_1000']} s "
                             f"per 1,000 polls; registry of 8 cards, {doc_bytes} bytes",
                        extra={"naive": nv}))
    finally:
        if load is not None:
            load.close()
        etcd.stop()
    return rows
