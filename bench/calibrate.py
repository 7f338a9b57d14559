"""How fast the host is, measured in the same run as the figures (``python -m bench`` runs it
first and records it in ``bench/results.json`` and in every figure's row).

Three readings, each a fixed piece of work whose cost moves with the host and not with the
project's code:

- ``etcd_idle_cores``: a fresh 3-member etcd of the bench's own (the figures' settings, no
  client) measured idle over ``IDLE_S`` seconds, in cores.
- ``cgen_us_per_request``: the C load generator (``bench/leanload.c``; the Python one when no
  compiler is installed, said in ``generator``) driving ``CGEN_GATEWAYS`` simulated gateways'
  whole mix against that etcd: its own CPU per request answered, in microseconds.
- ``python_s``: a fixed single-core pure-Python workload (``python_workload``), the median of
  ``PY_REPEATS`` runs: wall seconds (what a busy host slows) and CPU seconds of this thread.

A figure's absolute value moves with these; its ratio to a floor or baseline measured in the
same run moves far less (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import statistics
import time
import uuid
from typing import Any

from awide_cluster.contract import keys
from awide_harness.registry_writer import RegistryWriter
from bench import cgen
from bench.common import (
    WRITTEN_AT,
    Context,
    etcd_cpu,
    loadavg,
    make_dir_cards,
    start_etcd,
    store_for,
)
from bench.loadset import LoadSet, sleep_until

IDLE_S = 3.0                 # etcd's idle window (seconds)
CGEN_GATEWAYS = 200          # simulated gateways of the generator's window
CGEN_WARMUP_S = 1.0
CGEN_S = 3.0                 # the generator's measured window (seconds)
PY_ROUNDS = 400_000          # the Python workload's loop count (about 0.2 s on this box)
PY_REPEATS = 3


def python_workload(rounds: int = PY_ROUNDS) -> int:
    """A fixed single-core workload: integer arithmetic, a dict and a hash, as the
    control plane's own Python does (decode, compare, hash). Returns a checksum so nothing is
    optimised away."""
    acc = 0
    table: dict[int, int] = {}
    for i in range(rounds):
        acc = (acc * 31 + i) & 0xFFFFFFFF
        table[i & 1023] = acc
    digest = hashlib.sha256(repr(sorted(table.items())).encode()).digest()
    return acc ^ digest[0]


def time_python(rounds: int = PY_ROUNDS, repeats: int = PY_REPEATS) -> dict[str, float]:
    """Median wall and thread-CPU seconds of ``python_workload`` over ``repeats`` runs."""
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(repeats):
        c, t = time.thread_time(), time.perf_counter()
        python_workload(rounds)
        walls.append(time.perf_counter() - t)
        cpus.append(time.thread_time() - c)
    return {"python_s": round(statistics.median(walls), 4),
            "python_cpu_s": round(statistics.median(cpus), 4)}


async def _publish(ctx: Context, endpoints: tuple[str, ...], cluster: str) -> int:
    """A registry of 8 directory cards published; its mod_revision."""
    store = store_for(endpoints, cluster)
    try:
        await RegistryWriter(store, cluster, make_dir_cards(ctx.work / "cards-cal", 8),
                             written_at=WRITTEN_AT).publish()
        kv = await store.get(keys.REGISTRY)
        assert kv is not None
        return kv.mod_revision
    finally:
        await store.close()


def _generator(ctx: Context, etcd: Any, cluster: str, rev: int) -> dict[str, Any]:
    gen = cgen.choose(ctx.work / "cgen-cal")
    load = LoadSet(etcd.endpoints, cluster, procs=1, log_dir=ctx.work / "logs", name="cal-",
                   module="bench.leanload", seed=ctx.seed, extra=cgen.spec(cluster, rev),
                   program=gen.program)
    try:
        load.set(CGEN_GATEWAYS, "mix")
        time.sleep(CGEN_WARMUP_S)       # not a wait: the load warms up
        load.mark()
        t0 = time.monotonic()
        c0 = load.cpu()
        sleep_until(t0 + CGEN_S)
        win = load.window(t0, time.monotonic(), c0)
    finally:
        load.close()
    us = round(win.gen_cpu_s / win.requests * 1e6, 1) if win.requests else None
    return {"generator": gen.name, "cgen_us_per_request": us, "cgen_requests": win.requests,
            "cgen_gateways": CGEN_GATEWAYS}


def measure(ctx: Context) -> dict[str, Any]:
    """The calibration set (see the module's docstring)."""
    t_start = time.monotonic()
    out: dict[str, Any] = {"loadavg_1m": next(iter(loadavg()), None)}
    out.update(time_python())
    etcd = start_etcd(ctx, f"etcd-cal{uuid.uuid4().hex[:4]}")
    try:
        time.sleep(1.0)                 # not a wait: etcd's start-up work settles
        e0, t0 = etcd_cpu(etcd), time.monotonic()
        sleep_until(t0 + IDLE_S)
        out["etcd_idle_cores"] = round((etcd_cpu(etcd) - e0) / (time.monotonic() - t0), 4)
        cluster = f"cal{uuid.uuid4().hex[:6]}"
        rev = asyncio.run(_publish(ctx, etcd.endpoints, cluster))
        out.update(_generator(ctx, etcd, cluster, rev))
    finally:
        etcd.stop()
    out["seconds"] = round(time.monotonic() - t_start, 1)
    return out


def brief(cal: dict[str, Any]) -> str:
    """One line of the calibration, for the progress log and the report."""
    gen = cal.get("generator", "c")
    return (f"etcd idle {cal.get('etcd_idle_cores')} cores, {gen} generator "
            f"{cal.get('cgen_us_per_request')} us/request, Python workload "
            f"{cal.get('python_s')} s")
