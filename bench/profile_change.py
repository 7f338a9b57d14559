"""``python -m bench.profile_change [--changes 300] [--reps 10] [--profile] [--top 30]``: what
one gateway's reaction to a registry change costs, in one process, without etcd.

Figure 5's change on figure 5's registry (8 directory cards, one flipped between ``in`` and
``drained`` per generation) delivered as the registry watch delivers it: each generation's
document encoded as the leader encodes it, in a watch message as etcd's JSON gateway sends
it (base64 key and value, revisions as strings). One ``ClusterGateway`` in figure 5's
configuration (``bench.fleet``) takes each message through the same functions as its watch:
``codec.watch_frame`` and ``Codec.event`` (the message), ``Follower.on_event`` (the
untrusted decode and every check of the document), ``_take`` (apply: card workers, view,
change events). Its key layout is taken as verified and its cards' paths are probed once
before the changes, so every card is in service, as in the figure's settled fleet; its etcd
side (the record rewrite, polls) is not run: it is the only part left out.

Printed: the event loop thread's CPU per change (``time.thread_time``; the median and the
least of ``--reps`` repetitions of ``--changes`` changes) and its split into the message,
the follower's step and the apply. ``--profile``: a cProfile of the same loop (own CPU and
cumulative), which inflates small functions. Run it from any checkout
(each from its own directory: ``python -m`` puts the current directory first on the path,
before ``PYTHONPATH``) to compare two on the same host.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import cProfile
import json
import logging
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from awide_cluster.contract import keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.store import codec
from awide_gateway_cluster import ClusterGateway, connector
from awide_gateway_cluster.follower import Follower
from bench.common import WRITTEN_AT, make_dir_cards
from bench.fleet import gateway_config

CLUSTER = "p5wprofile"


class _History:
    """The follower's store as far as a watch event needs it: its etcd history."""

    timeline_epoch = 0


def watch_message(cdc: codec.Codec, value: bytes, revision: int) -> bytes:
    """One watch message carrying a put of ``registry`` at ``revision``, as etcd sends it."""
    kv = {"key": base64.b64encode(cdc.key(keys.REGISTRY)).decode(),
          "create_revision": "5", "mod_revision": str(revision),
          "version": str(revision - 4), "value": base64.b64encode(value).decode()}
    return json.dumps({"result": {"header": {"cluster_id": "14841639068965178418",
                                             "member_id": "10276657743932975437",
                                             "revision": str(revision), "raft_term": "2"},
                                  "events": [{"kv": kv}]}}).encode()


def messages(root: Path, count: int) -> list[bytes]:
    """``count`` + 1 generations: the first with every card in, then one card flipped each."""
    cards = make_dir_cards(root / "cards", 8)
    cdc = codec.Codec(keys.prefix(CLUSTER))
    out: list[bytes] = []
    prev: regdoc.Registry | None = None
    for r in range(count + 1):
        if r:
            i = (r - 1) % len(cards)
            state = "drained" if cards[i].state == "in" else "in"
            cards[i] = replace(cards[i], state=state,  # type: ignore[arg-type]
                               reason="" if state == "in" else "bench drain")
        table = regdoc.slot_table(tuple(cards), prev.slots if prev else regdoc.slotfn.EMPTY)
        prev = regdoc.Registry(cluster=CLUSTER, generation=r + 1, leader="s1",
                               cards=tuple(cards), slots=table, written_at=WRITTEN_AT)
        out.append(watch_message(cdc, regdoc.encode(prev), 10 + r))
    return out


async def run(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="awide-profile-change-"))
    try:
        await _run(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _run(args: argparse.Namespace, root: Path) -> None:
    lines = messages(root, args.changes * args.reps)
    cdc = codec.Codec(keys.prefix(CLUSTER))
    spec = {"endpoints": ["http://127.0.0.1:9"], "cluster": CLUSTER, "watch": True,
            "poll_interval": 1.0, "call_timeout": 0.5}
    gw = ClusterGateway(gateway_config(spec, 0))
    # started by hand: the parts a watch event goes through, no etcd
    gw._cards.connector = connector.for_config(gw.config, nvme=None, sysfs=None,
                                               read_label=None, worker=None)
    follower = gw._follower = Follower(_History(), cluster=CLUSTER,  # type: ignore[arg-type]
                                       call_timeout=0.5, clock=time.monotonic)
    gw._side.ok, gw._side.problem = True, ""
    sub = gw.subscribe(maxsize=100_000)

    def take(line: bytes) -> tuple[float, float, float]:
        t0 = time.thread_time()
        frame = codec.watch_frame(line)
        event = cdc.event(frame.events[0])
        t1 = time.thread_time()
        step = follower.on_event(event)
        t2 = time.thread_time()
        gw._take(step)
        t3 = time.thread_time()
        while sub.get_nowait() is not None:
            pass
        return t1 - t0, t2 - t1, t3 - t2

    take(lines[0])
    for _ in range(30):                 # the first probe of every card
        await asyncio.sleep(0.01)       # not a wait: the probes' turns of the loop
    start_in = len(gw.snapshot().in_service)
    if start_in != 8:
        raise SystemExit(f"only {start_in} of 8 cards in service")
    prof = cProfile.Profile(time.thread_time) if args.profile else None
    per: list[float] = []
    parts = [0.0, 0.0, 0.0]
    k = 1
    if prof is not None:
        prof.enable()
    for _ in range(args.reps):
        c0 = time.thread_time()
        for _ in range(args.changes):
            for j, t in enumerate(take(lines[k])):
                parts[j] += t
            k += 1
        per.append((time.thread_time() - c0) / args.changes)
        await asyncio.sleep(0)          # the loop's turn: the tasks the changes started
    if prof is not None:
        prof.disable()
    n = args.changes * args.reps
    print(f"{n} changes: {statistics.median(per) * 1000:.3f} ms of the loop thread's CPU per "
          f"change (median of {args.reps} repetitions; least {min(per) * 1000:.3f}): message "
          f"{parts[0] / n * 1000:.3f}, follower step {parts[1] / n * 1000:.3f}, apply "
          f"{parts[2] / n * 1000:.3f} (generations 1 to {gw.snapshot().generation}, "
          f"{start_in} cards in service at the first, {gw.stats().view_builds} views built)")
    if prof is not None:
        stats = pstats.Stats(prof, stream=sys.stdout)
        stats.sort_stats("tottime").print_stats(args.top)
        stats.sort_stats("cumulative").print_stats(args.top)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.profile_change",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--changes", type=int, default=300, help="changes per repetition")
    ap.add_argument("--reps", type=int, default=10, help="repetitions")
    ap.add_argument("--profile", action="store_true", help="a cProfile of the changes")
    ap.add_argument("--top", type=int, default=30, help="functions shown per profile")
    args: Any = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)    # as a figure 5 fleet process
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
