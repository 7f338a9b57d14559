"""Child process for figure 8: what the gateway library adds to a host program.

    python -m bench.gwfoot '{"endpoints": [...], "cluster": "c1", "expect_in": 8}'

Prints ``base`` (RSS of this interpreter with asyncio and json loaded: the host program before
the library), then imports ``awide_gateway_cluster``, starts one ``ClusterGateway`` (watch on,
8 cards) and prints ``ready`` with the RSS once every card is in service. The parent measures
CPU from /proc over a window; EOF on stdin stops the gateway.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * PAGE


def emit(kind: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"kind": kind, **fields}) + "\n")
    sys.stdout.flush()


async def main(spec: dict[str, Any]) -> None:
    emit("base", rss=rss())
    from awide_gateway_cluster import ClusterGateway  # noqa: PLC0415 - measured on purpose
    from awide_harness.waits import WaitTimeout, wait_until
    from bench.fleet import gateway_config
    from bench.proc import stdin_lines
    emit("imported", rss=rss())
    gw = ClusterGateway(gateway_config({**spec, "watch": True}, 0))
    await gw.start()
    try:
        await wait_until(lambda: len(gw.snapshot().in_service) >= int(spec.get("expect_in", 8)),
                         20.0, "the cards in service", poll=0.05)
    except WaitTimeout:
        pass                            # reported: ``in_service`` says how many
    emit("ready", rss=rss(), in_service=len(gw.snapshot().in_service))
    async for cmd in stdin_lines():
        if cmd.get("cmd") == "rss":
            emit("rss", rss=rss(), in_service=len(gw.snapshot().in_service))
    await gw.stop()


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
