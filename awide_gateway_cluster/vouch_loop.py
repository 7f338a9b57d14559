"""The gateway's vouching loop: when it reads the hosts' reports, and the registry it uses.

``VouchLoop`` keeps the registry the gateway uses (``used``: the applied one with only the
entries ``vouching.Vouching`` accepts) and reads the reports (bounded) when an applied registry
has new or changed entries, and every ``VOUCH_RETRY_POLLS`` poll intervals while entries are
refused. The gateway (``gateway.ClusterGateway``) acts on each change of ``used`` through the
``changed`` callback (the cards, the view, the state file).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from awide_cluster.contract.registry import Registry
from awide_cluster.store.port import Store
from awide_gateway_cluster.vouching import Vouching, read_reports

# while registry entries are refused, the reports are read again every this many poll
# intervals (a host whose report was missing may vouch again; nothing else re-reads them)
VOUCH_RETRY_POLLS = 10


class VouchLoop:
    def record_fields(self) -> dict[str, Any]:
        """What the gateway record says of the refusals (status names them)."""
        v = self.vouching
        if not v.refused:
            return {}
        return {"refused": v.refused, "refusing": len(v.refusals), "last_refusal": v.last}

    def __init__(self, vouching: Vouching, *, source: Callable[[], Registry | None],
                 store: Callable[[], Store],
                 changed: Callable[[Registry | None, Registry], None],
                 failed: Callable[[str, BaseException], None],
                 interval: float, call_timeout: float) -> None:
        self.vouching = vouching
        self._source, self._store, self._changed, self._failed = source, store, changed, failed
        self._interval, self._call = interval, call_timeout
        self.used: Registry | None = None   # what the gateway uses of the registry
        self.now = asyncio.Event()          # read the reports now

    def applied(self, reg: Registry, old: Registry | None) -> tuple[Registry | None, Registry]:
        """The follower applied ``reg`` (``old``: the registry before it): entries accepted
        before are used at once; new or changed ones wait for the hosts' reports, read after
        this registry (``run``). Returns the registry used before and the one used now."""
        used_before = self.used if self.used is not None else old
        self.used = self.vouching.use(reg, None)
        if self.vouching.pending(reg):
            self.now.set()
        return used_before, self.used

    async def at_start(self) -> None:
        """Read the reports once now if the first registry asked for it (a failure is
        counted and left to ``run``, which then tries again at once)."""
        if not self.now.is_set():
            return
        self.now.clear()
        try:
            await self.once()
        except Exception as e:      # noqa: BLE001 - its loop tries again at once
            self._failed("vouching", e)
            self.now.set()

    async def run(self) -> None:
        """Read the hosts' reports when an applied registry has new or changed entries, and
        every ``VOUCH_RETRY_POLLS`` poll intervals while entries are refused."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(VOUCH_RETRY_POLLS * self._interval):
                    await self.now.wait()
            self.now.clear()
            src = self._source()
            if src is None or not (self.vouching.pending(src) or self.vouching.refusals):
                continue
            try:
                await self.once()
            except Exception as e:      # noqa: BLE001 - no content may end this loop
                self._failed("vouching", e)
                await asyncio.sleep(self._interval)
                self.now.set()

    async def once(self) -> None:
        """One bounded read of the reports, then the registry applied before it judged."""
        src = self._source()
        if src is None:
            return
        async with asyncio.timeout(self._call * 2.5):
            reports = await read_reports(self._store(), self._call * 2)
        self.vouching.reads += 1
        if self._source() is not src:
            self.now.set()       # a newer one was applied meanwhile: read again
            return
        old, self.used = self.used, self.vouching.use(src, reports)
        self._changed(old, self.used)
