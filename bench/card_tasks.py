"""``python -m bench.card_tasks [--reps 30] [--gateways 50] [--rounds 60]``: what a task per card
costs a gateway's probe round, against one task for the round (docs/decisions.md, "A
gateway's card probes stay a task per card").

No etcd. ``--gateways`` gateways on one event loop, one probe worker, 8 labelled directory
cards each (on /dev/shm when it exists). Each round every card's label is read on the probe
worker (``ProbeWorker.run``, bounded, keyed, expiring, as ``Connector`` reads it) and folded
into its ``CardPath`` (``cardpath.advance``, a good probe of a path in service). Two shapes of
the same work, run alternately ``--reps`` times each:

- **tasks** (as built, ``card_workers``): a task per card, woken by its ``asyncio.Event`` at the
  round, reads, folds, waits again: two task steps a card a round;
- **round**: one task per gateway asks for every card's read at once and awaits them together
  (``asyncio.gather`` of the futures, no task per card), then folds each.

Each rep runs each shape with 8 cards and with 1; the marginal CPU of a card-round is the
difference over the 7 cards (the process's CPU, every thread: the reads on the worker thread
too). Printed: median and p99 over the reps of each shape's marginal µs per card-round, the
difference, and what it is per gateway-second at 8 cards and a 1 s poll; with the Python
workload of ``bench/calibrate.py`` as the host's calibration.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from awide_cluster.cards.directory import read_label
from awide_cluster.cards.worker import ProbeWorker
from awide_cluster.contract.registry import CardEntry
from awide_gateway_cluster.cardpath import Probe, advance
from awide_gateway_cluster.view import CardPath
from bench.calibrate import time_python
from bench.common import make_dir_cards, pct

CARDS = 8
PAUSE_S = 0.002         # between rounds: every gateway's round ends before the next begins


def _fold(card: CardEntry, local: CardPath, label: Any) -> CardPath:
    good = (label.serial, label.model) == (card.serial, card.model)
    probe = Probe(device=card.path, verified=True, good=good,
                  refused="" if good else "other storage in its place")
    return advance(local, probe, sick_polls=3, healthy_polls=1)


def _read(worker: ProbeWorker, gw: int, card: CardEntry) -> asyncio.Future[Any]:
    return worker.run(read_label, card.path, bound=1.0, key=f"gw{gw}:{card.id}:label",
                      expire=True)


async def tasks_shape(worker: ProbeWorker, fleets: list[list[CardEntry]],
                      rounds: int) -> list[list[CardPath]]:
    """A task per card, woken by an event each round (``CardWorkers._card_loop``'s shape).
    Every card's path after the last round."""
    wakes = [[asyncio.Event() for _ in cards] for cards in fleets]
    paths = [[CardPath(c.id) for c in cards] for cards in fleets]
    done = asyncio.Event()
    left = 0

    async def card_loop(gw: int, i: int, card: CardEntry) -> None:
        nonlocal left
        wake = wakes[gw][i]
        while True:
            await wake.wait()
            wake.clear()
            paths[gw][i] = _fold(card, paths[gw][i], await _read(worker, gw, card))
            left -= 1
            if not left:
                done.set()

    workers = [asyncio.create_task(card_loop(g, i, c))
               for g, cards in enumerate(fleets) for i, c in enumerate(cards)]
    for _ in range(rounds):
        left = len(workers)
        done.clear()
        for row in wakes:
            for w in row:
                w.set()
        await done.wait()
        await asyncio.sleep(PAUSE_S)
    for t in workers:
        t.cancel()
    await asyncio.gather(*workers, return_exceptions=True)
    return paths


async def round_shape(worker: ProbeWorker, fleets: list[list[CardEntry]],
                      rounds: int) -> list[list[CardPath]]:
    """One task per gateway: every card's read asked for at once, awaited together, folded.
    Every card's path after the last round."""
    paths = [[CardPath(c.id) for c in cards] for cards in fleets]

    async def one(gw: int) -> None:
        cards = fleets[gw]
        labels = await asyncio.gather(*(_read(worker, gw, c) for c in cards))
        row = paths[gw]
        for i, (card, label) in enumerate(zip(cards, labels, strict=True)):
            row[i] = _fold(card, row[i], label)

    for _ in range(rounds):
        await asyncio.gather(*(one(g) for g in range(len(fleets))))
        await asyncio.sleep(PAUSE_S)
    return paths


Shape = Callable[[ProbeWorker, list[list[CardEntry]], int],
                 Coroutine[Any, Any, list[list[CardPath]]]]


def _run(shape: Shape, fleets: list[list[CardEntry]], rounds: int) -> float:
    """Process CPU seconds of ``rounds`` rounds of ``shape`` (a fresh loop and worker)."""
    worker = ProbeWorker(name="bench-card-tasks")
    c0 = time.process_time()        # every thread's: the reads on the worker's too
    asyncio.run(shape(worker, fleets, rounds))
    return time.process_time() - c0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.card_tasks")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--gateways", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--out", help="the figures as JSON here too")
    args = ap.parse_args(argv)
    base = "/dev/shm" if Path("/dev/shm").is_dir() else None
    root = Path(tempfile.mkdtemp(prefix="awide-card-tasks-", dir=base))
    try:
        cards = make_dir_cards(root, CARDS)
        many = [list(cards) for _ in range(args.gateways)]
        one = [cards[:1] for _ in range(args.gateways)]
        shapes: dict[str, Shape] = {"tasks": tasks_shape, "round": round_shape}
        for shape in shapes.values():      # warm up: imports, the label cache, the heap
            _run(shape, many, 5)
        marginal: dict[str, list[float]] = {name: [] for name in shapes}
        per_card8: dict[str, list[float]] = {name: [] for name in shapes}
        card_rounds = args.gateways * args.rounds
        for rep in range(args.reps):
            order = list(shapes.items()) if rep % 2 == 0 else list(shapes.items())[::-1]
            for name, shape in order:
                eight = _run(shape, many, args.rounds)
                single = _run(shape, one, args.rounds)
                marginal[name].append((eight - single) / (card_rounds * (CARDS - 1)) * 1e6)
                per_card8[name].append(eight / (card_rounds * CARDS) * 1e6)
        cal = time_python()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result: dict[str, Any] = {"reps": args.reps, "gateways": args.gateways,
                              "rounds": args.rounds, "cards": CARDS, "calibration": cal}
    print(f"{args.reps} reps, {args.gateways} gateways x {args.rounds} rounds, {CARDS} cards "
          f"against 1; Python workload {cal['python_cpu_s']:.4f} s (bench/calibrate.py)")
    for name in shapes:
        m = marginal[name]
        result[name] = {"marginal_us_median": round(statistics.median(m), 2),
                        "marginal_us_p99": round(pct(m, 99) or 0.0, 2),
                        "all_8_us_median": round(statistics.median(per_card8[name]), 2)}
        print(f"  {name:5}: a card-round {statistics.median(m):.2f} us marginal (median; p99 "
              f"{pct(m, 99):.2f}), {statistics.median(per_card8[name]):.2f} us with 8 cards "
              "all counted")
    diffs = [t - r for t, r in zip(marginal["tasks"], marginal["round"], strict=True)]
    saved = statistics.median(diffs)
    result["saved_us_per_card_round_median"] = round(saved, 2)
    result["saved_ms_per_gateway_second_8_cards"] = round(saved * CARDS / 1000.0, 4)
    print(f"  one task a round instead of a task a card saves {saved:.2f} us a card-round "
          f"(median of the reps' differences; p99 {pct(diffs, 99):.2f}): "
          f"{saved * CARDS / 1000.0:.4f} ms per gateway-second at {CARDS} cards and a 1 s poll")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
