"""Plays the leader for tests and benchmarks: registry documents written straight to etcd.

``RegistryWriter(store, cluster, cards)`` writes the next generation on each ``publish``
(slots kept from the previous document, as the leader does); ``toggle(i)`` flips card ``i``
between in and drained; ``doc(cards)`` is the next document as JSON, for tests that corrupt
it. ``put_retrying`` repeats an idempotent put through an etcd election (a fault may have
frozen the raft leader) and returns the monotonic time the successful put was sent.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from awide_cluster.contract import keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract.registry import CardEntry, Registry
from awide_cluster.store.errors import Timeout, Unavailable
from awide_cluster.store.port import Store
from awide_harness.waits import wait_until


async def put_retrying(store: Store, key: str, value: bytes | str, *, bound: float = 8.0,
                       call: float = 1.0) -> float:
    """An idempotent put, repeated through an etcd election; the monotonic time it was sent.
    WaitTimeout (naming etcd's last error) when no put succeeded within ``bound``."""
    sent = 0.0

    async def put() -> bool:
        nonlocal sent
        sent = time.monotonic()
        await store.put(key, value, timeout=call)
        return True

    await wait_until(put, bound, f"etcd takes the put of {key}", poll=0.05,
                     ignore=(Timeout, Unavailable))
    return sent


class RegistryWriter:
    """Writes registry documents, generation + 1 each time (``after``: the registry last
    published by another writer, to continue from)."""

    def __init__(self, store: Store, cluster: str, cards: Sequence[CardEntry] = (), *,
                 after: Registry | None = None, written_at: str = "",
                 leader: str = "s1") -> None:
        self.store, self.cluster, self.cards = store, cluster, list(cards)
        self.reg: Registry | None = after
        self.written_at, self.leader = written_at, leader
        self.sent: float | None = None      # monotonic time the last publish's put was sent

    def document(self, cards: Sequence[CardEntry]) -> Registry:
        """The next generation with ``cards`` (not written)."""
        prev = self.reg
        table = regdoc.slot_table(tuple(cards), prev.slots if prev else regdoc.slotfn.EMPTY)
        return Registry(cluster=self.cluster, generation=(prev.generation if prev else 0) + 1,
                        leader=self.leader, cards=tuple(cards), slots=table,
                        written_at=self.written_at)

    def doc(self, cards: Sequence[CardEntry]) -> dict[str, Any]:
        """The JSON document of the next generation, for tests that corrupt it."""
        return regdoc.to_dict(self.document(cards))

    async def publish(self, cards: Sequence[CardEntry] | None = None) -> Registry:
        """Write the next generation (``cards``, default the writer's own)."""
        reg = self.document(self.cards if cards is None else cards)
        self.sent = await self.put_raw(regdoc.encode(reg))
        self.reg = reg
        return reg

    async def put_raw(self, raw: bytes | str) -> float:
        """Put a document as it is (retried through an election); the time it was sent."""
        return await put_retrying(self.store, keys.REGISTRY, raw)

    async def toggle(self, index: int) -> tuple[int, float]:
        """Flip card ``index`` between in and drained (every gateway sees an event):
        (generation, monotonic time the put was sent)."""
        c = self.cards[index]
        state = "drained" if c.state == "in" else "in"
        self.cards[index] = replace(c, state=state, health="ok",  # type: ignore[arg-type]
                                    reason="" if state == "in" else "bench drain")
        reg = await self.publish()
        assert self.sent is not None
        return reg.generation, self.sent
