"""The gateway's use of its state file (``state_file.py``): read at start, served while etcd
has not answered since, replaced by etcd's first answer, and offered for writing whenever the
registry in use or the layout verified live changes.

``StateKeeping`` holds what the gateway knows of its state file (the state served, the note
``stats()`` shows, the layout verified live or taken from the file, the last state offered);
the gateway (``gateway.ClusterGateway``) acts on its answers: the cards, the view, the events.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from awide_cluster.contract import keys
from awide_cluster.contract.records import LayoutRecord, iso
from awide_cluster.contract.registry import Registry
from awide_gateway_cluster import state_file as sf
from awide_gateway_cluster.config import GatewayConfig
from awide_gateway_cluster.follower import FollowStep

log = logging.getLogger("awide_gateway_cluster")

# how long after etcd answered the gateway's record still says it served its state file (the
# operator sees it in ``status`` after an outage; a passing warning then goes by itself)
SERVED_SHOWN = 900.0


class StateKeeping:
    def __init__(self, config: GatewayConfig, call_timeout: float) -> None:
        self._config, self._id, self._call = config, config.id, call_timeout
        # the registry served while etcd has not answered since the start (None: none
        # served), the layout verified live (or the file's), the last state offered
        self.saved: sf.SavedState | None = None
        self.note = ""
        self.layout_from_file = False
        self.verified_layout: LayoutRecord | None = None
        self._offered: tuple[Registry, LayoutRecord | None] | None = None
        # the state file served at this start: its age then (s), since and until when (wall
        # clock; until None while it is served)
        self.served: tuple[float, float, float | None] | None = None
        d = config.state.dir
        self.path = sf.path_for(d, self._id) if d is not None else None
        self._keeper = sf.StateKeeper(self.path) if self.path else None

    async def read(self) -> sf.SavedState | None:
        """The state file, read (bounded, off the loop) and judged; None when there is none
        or it may not be served (said in one log line)."""
        path = self.path
        if path is None:
            return None
        c = self._config
        try:
            async with asyncio.timeout(max(1.0, self._call * 3)):
                got = await asyncio.to_thread(sf.read, path, cluster=c.cluster,
                                              now=time.time(), max_age=c.state.max_age)
        except TimeoutError:
            got = f"state file {path} not read within {max(1.0, self._call * 3):g} s"
        if isinstance(got, str):
            self.note = got
            log.log(logging.INFO if got.startswith("no state file") else logging.WARNING,
                    "gateway %s: %s; it starts with what etcd says (nothing while etcd "
                    "does not answer)", self._id, got)
            return None
        return got

    def serve(self, saved: sf.SavedState, first: FollowStep, *, etcd_registry: Registry | None,
              layout: LayoutRecord, layout_ok: bool) -> bool:
        """The first poll is done: True when ``saved`` is to be served (etcd did not answer
        it). Its layout is taken as verified when it is the gateway's and none was verified
        live (``layout_from_file``)."""
        now = time.time()
        # the follower's words for a read etcd did not answer (an absent key, a refused
        # document: etcd answered, and the file is not served)
        unanswered = first.outcome == "failed" and first.detail.startswith("registry not read")
        if etcd_registry is not None or not unanswered:
            self.note = "state file not needed: etcd answered at start"
            log.info("gateway %s: etcd answered at start; state file (%s) not used",
                     self._id, saved.describe(now))
            return False
        self.saved = saved
        self.served = (max(0.0, now - saved.saved_at), now, None)
        self.note = f"serving the state file: {saved.describe(now)}"
        if saved.layout is not None and saved.layout.same_layout(layout) and not layout_ok:
            self.layout_from_file = True
            self.verified_layout = saved.layout
        return True

    def end_serving(self, reg: Registry, *, judge: bool) -> Registry | None:
        """etcd's registry ``reg`` was applied: the state file is no longer served. With
        ``judge`` (nothing read from etcd before), the registry it served (None: none)."""
        saved, self.saved = self.saved, None
        if self.served is not None and self.served[2] is None:
            self.served = (self.served[0], self.served[1], time.time())
        if not judge or saved is None:
            return None
        why = sf.judge(saved, cluster=self._config.cluster, now=time.time(),
                       max_age=self._config.state.max_age, known=reg)
        self.note = (f"replaced by etcd's generation {reg.generation}"
                     + (f" ({why})" if why else ""))
        log.warning("gateway %s: etcd answered: registry generation %d lineage %s "
                    "replaces the state file's generation %d lineage %s%s", self._id,
                    reg.generation, reg.lineage or "-", saved.generation,
                    saved.lineage or "-", f" ({why})" if why else "")
        return saved.registry

    def record_fields(self, now: float) -> dict[str, Any]:
        """What the gateway's record says of the state file served at this start: while it
        is served, and for ``SERVED_SHOWN`` seconds after etcd's registry replaced it."""
        if self.served is None:
            return {}
        age, since, until = self.served
        if until is not None and now - until > SERVED_SHOWN:
            return {}
        return {"state_age": round(age), "state_since": iso(since), "state_until": iso(until)}

    def layout_verified(self, layout: LayoutRecord) -> None:
        """etcd confirmed ``layout``."""
        self.layout_from_file = False
        self.verified_layout = layout

    def save(self, reg: Registry | None) -> None:
        """Offer ``reg`` (the registry in use) and the layout verified for the state file,
        when either changed since the last offer."""
        if self._keeper is None or reg is None:
            return
        key = (reg, self.verified_layout)
        if key == self._offered:
            return
        self._offered = key
        self._keeper.offer(sf.SavedState(
            cluster=self._config.cluster, prefix=keys.prefix(self._config.cluster),
            gateway=self._id, registry=reg, layout=self.verified_layout,
            saved_at=time.time()))

    async def flush(self, timeout: float) -> None:
        """Wait (bounded) for the writes in progress."""
        if self._keeper is not None:
            await self._keeper.flush(timeout)
