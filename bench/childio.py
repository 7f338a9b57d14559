"""What the bench's child processes share and a measured one may load: stdlib only, so that a
child measuring the gateway library's footprint (``bench.gwfoot``) loads nothing of the bench's
or the harness's own (``bench.common`` pulls in the daemon's config models, the cards and the
etcd harness, which a host program of the library would not have).

``stdin_lines``: the parent's JSON commands; ``gateway_doc``: a gateway config as data, the one
every bench gateway uses (``bench.fleet.gateway_config`` parses it).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from typing import Any


def emit(kind: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"kind": kind, **fields}) + "\n")
    sys.stdout.flush()


async def stdin_lines() -> AsyncIterator[dict[str, Any]]:
    """Async iterator of JSON commands from stdin (ends at EOF)."""
    import asyncio  # noqa: PLC0415 - a child that reads no commands needs no event loop
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = await reader.readline()
        if not line:
            return
        try:
            yield json.loads(line)
        except ValueError:
            continue


def gateway_doc(spec: dict[str, Any], i: int) -> dict[str, Any]:
    """Gateway ``i``'s config as data: the spec's endpoints (rotated by ``i`` unless
    ``rotate`` is false), cluster, timing and call bounds; vouching off (the bench plays the
    leader: no daemon reports to vouch)."""
    eps = list(spec["endpoints"])
    if spec.get("rotate", True):
        k = i % len(eps)
        eps = eps[k:] + eps[:k]
    call = float(spec.get("call_timeout", 0.5))
    return {
        "mode": "cluster", "cluster": spec["cluster"], "host": f"gpu{i // 8}",
        "pod": f"pod{i}",
        "etcd": {"endpoints": eps, "call_timeout": call,
                 "hedge_after": float(spec.get("hedge_after", 0.05))},
        "timing": {"poll_interval": float(spec.get("poll_interval", 1.0)),
                   "sick_polls": 3, "healthy_polls": 1},
        "model": {"name": "bench/model-8b", "num_layers": 32},
        "watch": bool(spec.get("watch", True)),
        "start_timeout": 5.0,
        "vouch": False,
    }
