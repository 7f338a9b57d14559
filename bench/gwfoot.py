"""Child process for figure 8: what the gateway library adds to a host program.

    python -m bench.gwfoot '{"endpoints": [...], "cluster": "c1", "expect_in": 8}'

Prints ``base`` (RSS of this interpreter with asyncio and json loaded: the host program before
the library), then imports ``awide_gateway_cluster`` and prints ``imported``, starts one
``ClusterGateway`` (watch on, 8 cards) and prints ``ready`` with the RSS once every card is in
service (waited for on the gateway's own change events). The parent measures CPU from /proc
over a window; EOF on stdin stops the gateway. Nothing but the library is loaded after
``base``: the bench's helpers here are ``bench.childio``'s (stdlib only), never
``bench.common``, ``bench.fleet`` or the harness, whose imports (the daemon's config models,
the cards, the etcd harness) would be counted as the library's.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from bench.childio import emit, gateway_doc, stdin_lines

PAGE = os.sysconf("SC_PAGE_SIZE")
READY_BOUND = 20.0      # seconds the gateway gets to have every card in service


def rss() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * PAGE


async def main(spec: dict[str, Any]) -> None:
    emit("base", rss=rss())
    from awide_gateway_cluster import ClusterGateway, parse_config  # noqa: PLC0415 - measured
    emit("imported", rss=rss())
    gw = ClusterGateway(parse_config(gateway_doc({**spec, "watch": True}, 0)))
    want = int(spec.get("expect_in", 8))
    changes = gw.subscribe()
    await gw.start()
    try:
        async with asyncio.timeout(READY_BOUND):
            while len(gw.snapshot().in_service) < want:
                await changes.get()
    except TimeoutError:
        pass                            # reported: ``in_service`` says how many
    changes.close()
    emit("ready", rss=rss(), in_service=len(gw.snapshot().in_service))
    async for cmd in stdin_lines():
        if cmd.get("cmd") == "rss":
            emit("rss", rss=rss(), in_service=len(gw.snapshot().in_service))
    await gw.stop()


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
