"""Following the registry: a pure decision over each poll's outcome, and a bounded poll.

The poll is one ranged read of ``registry`` with ``min_mod_revision`` = the last seen
``mod_revision`` + 1: while the key is unchanged etcd answers with no value (a couple of
hundred bytes) and nothing is decoded. ``count`` tells "unchanged" (1) from "absent" (0).

What is applied, and what is kept (``step``):
- a changed document over its bound (``bounds.REGISTRY_MAX_BYTES``) is refused by name
  without being decoded (``ValueTooLarge`` names its mod_revision), like a corrupt one;
- a changed document is decoded, checked to name this cluster and not to go back (within one
  lineage the generation only grows: ``contract.registry.went_back``), and its slot table recomputed
  with the shared slot function (``contract.registry.check_slots``); any failure (corrupt,
  unknown schema, other cluster, version skew) keeps the last good registry, is counted and
  reported, and the same bad revision is not fetched again;
- a failed read (etcd unreachable, frozen, no quorum, timeout), or a registry key that is
  absent: keeps the last good registry. Never empties it: "unreachable is not empty".
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from awide_cluster.contract import bounds, keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract.registry import (
    Registry,
    RegistryError,
    UnknownSchema,
    check_slots,
    went_back,
)
from awide_cluster.store.errors import StoreError, ValueTooLarge
from awide_cluster.store.port import Store
from awide_cluster.store.types import RangeResult

StepOutcome = Literal["applied", "unchanged", "rejected", "failed"]


@dataclass(frozen=True, slots=True)
class FollowState:
    registry: Registry | None = None     # last good registry (None until the first)
    seen_revision: int = 0               # mod_revision of the last document looked at
    applied_revision: int = 0            # mod_revision of ``registry``
    last_ok: float | None = None         # clock time of the last poll etcd answered
    failures: int = 0                    # consecutive failed polls
    problem: str = ""                    # why the view is stale ("" = fresh)
    polls: int = 0
    failed_polls: int = 0
    rejected: int = 0                    # documents refused (corrupt, unknown, skew, cluster)
    skew: int = 0                        # of which version skew


@dataclass(frozen=True, slots=True)
class FollowStep:
    outcome: StepOutcome
    registry: Registry | None = None     # the newly applied registry (outcome "applied")
    detail: str = ""


def step(state: FollowState, answer: RangeResult | BaseException, now: float, *,
           cluster: str) -> tuple[FollowState, FollowStep]:
    """Fold one poll's answer (or its error) into the follow state."""
    polls = state.polls + 1
    if isinstance(answer, ValueTooLarge) and answer.mod_revision:
        # refused like a corrupt document, and that revision is not fetched again
        base = replace(state, polls=polls, last_ok=now, failures=0,
                       seen_revision=answer.mod_revision)
        return _reject(base, f"registry refused: value over {answer.limit} bytes")
    if isinstance(answer, BaseException):
        why = f"registry not read: {type(answer).__name__}: {answer}".rstrip(": ")
        return replace(state, polls=polls, failures=state.failures + 1, problem=why,
                       failed_polls=state.failed_polls + 1), FollowStep("failed", detail=why)
    if not answer.kvs:
        if answer.count == 0:
            why = "registry key absent (no leader has written one yet); keeping the last good"
            return replace(state, polls=polls, failures=state.failures + 1, problem=why,
                           failed_polls=state.failed_polls + 1), FollowStep("failed", detail=why)
        fresh = replace(state, polls=polls, last_ok=now, failures=0,
                        problem=state.problem if state.seen_revision != state.applied_revision
                        else "")
        return fresh, FollowStep("unchanged")
    kv = answer.kvs[0]
    base = replace(state, polls=polls, last_ok=now, failures=0, seen_revision=kv.mod_revision)
    try:
        reg = regdoc.decode(kv.value)
        if reg.cluster != cluster:
            raise RegistryError(f"registry names cluster {reg.cluster!r}, this gateway is in "
                                f"{cluster!r}")
    except UnknownSchema as e:
        return _reject(base, f"unknown schema: {e}")
    except RegistryError as e:
        return _reject(base, f"corrupt registry: {e}")
    back = went_back(state.registry, reg)
    if back is not None:
        return _reject(base, f"registry refused: {back}")
    skew = check_slots(reg)
    if skew is not None:
        st, d = _reject(base, f"version skew, generation {reg.generation} not applied: {skew}")
        return replace(st, skew=st.skew + 1), d
    applied = replace(base, registry=reg, applied_revision=kv.mod_revision, problem="")
    detail = ""
    if state.registry is not None and state.registry.lineage != reg.lineage:
        detail = (f"registry lineage changed from {state.registry.lineage or '-'} to "
                  f"{reg.lineage or '-'} (re-created): generation {reg.generation} applied "
                  f"after {state.registry.generation}")
    return applied, FollowStep("applied", registry=reg, detail=detail)


def _reject(state: FollowState, why: str) -> tuple[FollowState, FollowStep]:
    why = f"{why}; keeping generation " + (
        str(state.registry.generation) if state.registry else "none (no registry yet)")
    return (replace(state, rejected=state.rejected + 1, problem=why),
            FollowStep("rejected", detail=why))


class Follower:
    """The I/O shell: one bounded poll at a time. ``state`` is swapped, never mutated."""

    def __init__(self, store: Store, *, cluster: str, call_timeout: float,
                 clock: Callable[[], float]) -> None:
        self.store, self.cluster = store, cluster
        self.call_timeout = call_timeout
        self.clock = clock
        self.state = FollowState()

    async def poll(self) -> FollowStep:
        since = self.state.seen_revision + 1 if self.state.seen_revision else None
        answer: RangeResult | BaseException
        try:
            # the store bounds the call; the outer bound is a second, independent fence
            async with asyncio.timeout(self.call_timeout * 1.2 + 0.05):
                answer = await self.store.range(
                    keys.REGISTRY, min_mod_revision=since, timeout=self.call_timeout,
                    max_value_bytes=bounds.REGISTRY_MAX_BYTES)
        except (StoreError, TimeoutError, OSError) as e:
            answer = e
        self.state, taken = step(self.state, answer, self.clock(), cluster=self.cluster)
        return taken

    def staleness(self) -> float | None:
        """Seconds since the last poll etcd answered (None: never answered)."""
        if self.state.last_ok is None:
            return None
        return max(0.0, self.clock() - self.state.last_ok)
