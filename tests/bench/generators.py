"""What the load generators' tests share: a registry to poll and one window of polls."""

from __future__ import annotations

import time

from awide_cluster.contract import keys
from bench.common import store_for
from bench.loadset import LoadSet, Window

SPAN = 3.0      # seconds of one window; with the tests' 10 s lease a keepalive is due every 3.3 s


async def registry_revision(endpoints: tuple[str, ...], cluster: str) -> int:
    """Put a registry for ``cluster`` and return its revision (the generators' min_mod_revision)."""
    store = store_for(endpoints, cluster)
    try:
        return await store.put(keys.REGISTRY, b'{"generation": 1}')
    finally:
        await store.close()


def window(load: LoadSet) -> Window:
    """The polls of the next SPAN seconds (the generator answers once they are all done)."""
    load.mark()
    t0 = time.monotonic()
    return load.window(t0, t0 + SPAN, load.cpu())


def windows(loads: dict[str, LoadSet]) -> dict[str, Window]:
    """The polls of the next SPAN seconds of every load at once: each counts its own."""
    for load in loads.values():
        load.mark()
    cpu = {name: load.cpu() for name, load in loads.items()}
    t0 = time.monotonic()
    return {name: load.window(t0, t0 + SPAN, cpu[name]) for name, load in loads.items()}
