"""Following the registry: a pure decision over each poll's answer and each watch event,
and the bounded poll.

The poll is one ranged read of ``registry`` with ``min_mod_revision`` = the last seen
``mod_revision`` + 1: while the key is unchanged etcd answers with no value (a couple of
hundred bytes) and nothing is decoded. ``count`` tells "unchanged" (1) from "absent" (0).
Polls are serializable (any member answers from its own copy, no raft round) except every
``linearizable_every``-th, and every one after a linearizable poll that failed until one is
answered, which are linearizable (docs/gateway.md, "Consistency"). The store
refuses an answer below the highest revision it has seen (``RevisionWentBack``: the hedge moves
on to another member), so a lagging member cannot answer a poll once a newer revision is known.

A watch event on ``registry`` goes through the same ``step`` as a polled answer: the value it
carries is checked exactly like a polled one (same bound, decode, cluster, ``went_back``,
slot check, same counters); it costs no read.

What is applied, and what is kept (``step``):
- a document whose ``mod_revision`` is not above the last one looked at (``seen_revision``) is
  old news (a lagging member, a poll overtaken by a watch event): not decoded, nothing changes;
- a changed document over its bound (``bounds.REGISTRY_MAX_BYTES``) is refused by name
  without being decoded (``ValueTooLarge`` names its mod_revision; a watch event's value is
  measured), like a corrupt one;
- a changed document is decoded, checked to name this cluster and not to go back (within one
  lineage the generation only grows: ``contract.registry.went_back``), and its slot table recomputed
  with the shared slot function (``contract.registry.check_slots``); any failure (corrupt,
  unknown schema, other cluster, version skew) keeps the last good registry, is counted and
  reported, and the same bad revision is not fetched again;
- a failed read (etcd unreachable, frozen, no quorum, timeout), or a registry key that is
  absent (polled, or deleted in a watch event): keeps the last good registry. Never empties
  it: "unreachable is not empty".

A watch event makes the view newer, never by itself the proof that it is fresh. What proves it
fresh (``last_ok``, which the stale flag and ``staleness`` rest on) is a poll that was answered,
or a progress notification of the watch (``Progress``): etcd sends one, every
``--experimental-watch-progress-notify-interval``, only to a watch that has been sent every
event up to the revision it names, so it says what a serializable poll answering "nothing
newer" says, from the same member (docs/gateway.md, "Consistency"). etcd sends no
notification to a watch that had an event in the interval; a message whose last event is at
the message's own header revision (the member's revision when it sent it) proves the same,
and is folded as a ``Progress`` too (``by_event``). A progress notification
never clears a problem (a failed read, an absent or refused document): only a poll does, and
while there is one the gateway polls every turn. ``Follower.skips`` says when a turn's
serializable poll may be left out because the watch proved the view fresh meanwhile; the
linearizable poll of every ``linearizable_every``-th turn is never left out.

The revisions above belong to one etcd history. When the store adopts a new one (a restored or
rebuilt etcd: ``store.timeline_epoch`` grew, awide_cluster/store/timeline.py), ``rebase`` forgets
them and keeps the registry: the next poll reads the registry of the new history whatever its
``mod_revision``, and ``went_back`` judges it by generation and lineage (an older generation
of the same lineage is refused until the leader republishes a higher one).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from awide_cluster.contract import bounds, keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract import versions as ver
from awide_cluster.contract.registry import (
    Registry,
    RegistryError,
    UnknownSchema,
    check_slots,
    went_back,
)
from awide_cluster.store.errors import BadResponse, StoreError, ValueTooLarge
from awide_cluster.store.port import StoreReader
from awide_cluster.store.types import KeyRead, KeyValue, ManyGot, RangeResult, WatchEvent
from awide_gateway_cluster.backoff import STRETCH_MAX, Stretch, ran_late

StepOutcome = Literal["applied", "unchanged", "rejected", "failed"]


@dataclass(frozen=True, slots=True)
class Progress:
    """A progress notification of the registry watch: every change of ``registry`` up to
    ``revision`` has been delivered to this gateway. ``by_event``: not a notification but a
    watch message whose events end at its own header revision (``registry_watch.proves``),
    which proves the same and is not counted as a notification."""
    revision: int
    by_event: bool = False


Answer = RangeResult | WatchEvent | Progress | BaseException

# the most one watch message on ``registry`` may hold: one event whose value is at the bound
# (base64: 4/3) plus its key, revisions and header (8 KiB is generous). A larger message is
# refused unparsed (WatchMessageTooLarge) and the gateway polls instead: one bounded read.
WATCH_MESSAGE_BYTES = (bounds.REGISTRY_MAX_BYTES + 2) // 3 * 4 + 8 * 1024


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
    events: int = 0                      # watch events on ``registry`` folded in
    known_revision: int = 0              # cluster revision the view is known up to
    epoch: int = 0                       # the store's history epoch these revisions are of
    history_resets: int = 0              # new etcd histories followed
    progress: int = 0                    # watch progress notifications folded in
    last_progress: float | None = None   # clock time of the last one that proved freshness


@dataclass(frozen=True, slots=True)
class FollowStep:
    outcome: StepOutcome
    registry: Registry | None = None     # the newly applied registry (outcome "applied")
    detail: str = ""
    replaced: Registry | None = None     # the registry it replaced (outcome "applied")
    problem_before: str = ""             # the state's problem before this step


def rebase(state: FollowState, epoch: int) -> FollowState:
    """The state in a new etcd history: its revisions forgotten, the registry kept."""
    if epoch == state.epoch:
        return state
    return replace(state, seen_revision=0, applied_revision=0, known_revision=0, epoch=epoch,
                   history_resets=state.history_resets + 1, last_progress=None)


def step(state: FollowState, answer: Answer, now: float, *, cluster: str,
         memo: regdoc.CardMemo | None = None) -> tuple[FollowState, FollowStep]:
    """Fold one poll's answer (or its error), one watch event or one progress notification
    into the follow state. ``memo``: the reader's card memo (``registry.CardMemo``), which
    changes no outcome, only what the decode costs."""
    if isinstance(answer, WatchEvent):
        new, taken = _event(state, answer, cluster, memo)
    elif isinstance(answer, Progress):
        new, taken = _progress(state, answer, now)
    else:
        new, taken = _poll(state, answer, now, cluster, memo)
    # a new FollowStep, not ``replace``: made once per change on every gateway
    return new, FollowStep(taken.outcome, taken.registry, taken.detail,
                           state.registry if taken.outcome == "applied" else None,
                           state.problem)


def _poll(state: FollowState, answer: RangeResult | BaseException, now: float,
          cluster: str, memo: regdoc.CardMemo | None) -> tuple[FollowState, FollowStep]:
    polls = state.polls + 1
    if isinstance(answer, ValueTooLarge) and answer.mod_revision:
        if answer.mod_revision <= state.seen_revision:     # already refused (or older)
            return _unchanged(replace(state, polls=polls, last_ok=now, failures=0))
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
        return _unchanged(replace(state, polls=polls, last_ok=now, failures=0,
                                  known_revision=max(state.known_revision, answer.revision)))
    base = replace(state, polls=polls, last_ok=now, failures=0,
                   known_revision=max(state.known_revision, answer.revision))
    return _look(base, answer.kvs[0], cluster, memo)


def _event(state: FollowState, event: WatchEvent, cluster: str,
           memo: regdoc.CardMemo | None) -> tuple[FollowState, FollowStep]:
    """A watch event: its value is looked at like a polled one; no read, no ``last_ok``."""
    kv = event.kv
    base = replace(state, events=state.events + 1,
                   known_revision=max(state.known_revision, kv.mod_revision))
    if event.kind == "delete":
        if kv.mod_revision <= state.seen_revision:
            return base, FollowStep("unchanged")
        why = (f"registry key deleted (watch, revision {kv.mod_revision}); keeping the last "
               "good")
        return (replace(base, seen_revision=kv.mod_revision, problem=why),
                FollowStep("failed", detail=why))
    new, taken = _look(base, kv, cluster, memo)
    if taken.outcome == "unchanged" or (taken.outcome == "applied" and state.failures):
        # only a poll proves the view fresh: while polls fail the stale flag stays
        new = replace(new, problem=state.problem)
    return new, taken


def _progress(state: FollowState, p: Progress, now: float) -> tuple[FollowState, FollowStep]:
    """Every change up to ``p.revision`` delivered: the view is proven fresh as by a poll that
    found nothing newer, unless it has a problem (which only a poll clears)."""
    base = replace(state, progress=state.progress + (0 if p.by_event else 1),
                   known_revision=max(state.known_revision, p.revision))
    if state.problem or state.registry is None:
        return base, FollowStep("unchanged")
    return replace(base, last_ok=now, last_progress=now), FollowStep("unchanged")


def _unchanged(state: FollowState) -> tuple[FollowState, FollowStep]:
    fresh = replace(state, problem=state.problem if state.seen_revision != state.applied_revision
                    else "")
    return fresh, FollowStep("unchanged")


def _look(base: FollowState, kv: KeyValue, cluster: str,
          memo: regdoc.CardMemo | None) -> tuple[FollowState, FollowStep]:
    """The one check of a registry document, polled or watched."""
    if kv.mod_revision <= base.seen_revision:
        # already looked at (applied or refused) or older: a lagging member, an overtaken poll
        return _unchanged(base)
    state = base
    seen = kv.mod_revision

    def reject(why: str) -> tuple[FollowState, FollowStep]:
        return _reject(replace(state, seen_revision=seen), why)

    if len(kv.value) > bounds.REGISTRY_MAX_BYTES:
        return reject(f"registry refused: value over {bounds.REGISTRY_MAX_BYTES} bytes")
    try:
        reg = regdoc.decode(kv.value, memo=memo)
        if reg.cluster != cluster:
            raise RegistryError(f"registry names cluster {reg.cluster!r}, this gateway is in "
                                f"{cluster!r}")
    except UnknownSchema as e:
        return reject(f"unknown schema: {e}")
    except RegistryError as e:
        return reject(f"corrupt registry: {e}")
    back = went_back(state.registry, reg)
    if back is not None:
        return reject(f"registry refused: {back}")
    skew = check_slots(reg, memo=memo)
    if skew is not None:
        st, d = reject(f"version skew, generation {reg.generation} not applied: {skew}")
        return replace(st, skew=st.skew + 1), d
    applied = replace(state, seen_revision=seen, registry=reg, applied_revision=seen,
                      problem="")
    detail = ""
    newer = ver.newer_note("registry", reg.schema_version)
    if newer and (state.registry is None
                  or state.registry.schema_version != reg.schema_version):
        detail = newer      # a newer minor: applied, said once per schema change
    if state.registry is not None and state.registry.lineage != reg.lineage:
        detail = (f"{detail + '; ' if detail else ''}registry lineage changed from "
                  f"{state.registry.lineage or '-'} to "
                  f"{reg.lineage or '-'} (re-created): generation {reg.generation} applied "
                  f"after {state.registry.generation}")
    return applied, FollowStep("applied", registry=reg, detail=detail)


def _reject(state: FollowState, why: str) -> tuple[FollowState, FollowStep]:
    why = f"{why}; keeping generation " + (
        str(state.registry.generation) if state.registry else "none (no registry yet)")
    return (replace(state, rejected=state.rejected + 1, problem=why),
            FollowStep("rejected", detail=why))


def _ranged(got: ManyGot) -> RangeResult | BaseException:
    """A ranged key's answer in a ``read_many``: its RangeResult or its refusal."""
    if isinstance(got, (RangeResult, ValueTooLarge)):
        return got
    return BadResponse(f"read_many: {keys.REGISTRY} answered as {type(got).__name__}, "
                       "not as a range")


class Follower:
    """The I/O shell: one bounded poll at a time, and the watch events handed to ``observe``.
    ``state`` is swapped, never mutated (the poll folds its answer into the state as it is
    when the answer arrives, so a watch event taken meanwhile is never lost).

    ``linearizable_every``: the poll of the first turn and of every Nth turn after it is
    linearizable, the others serializable; 1 = all linearizable. ``phase`` (0 to N - 1) moves
    the periodic ones: the turns ``t`` with ``(t + phase) % N == 0``. Gateways started
    together and given random phases do not send their linearizable reads in step. After a
    linearizable poll that failed, every poll is linearizable until one is answered: a member
    that answers serializable reads without a quorum behind it (cut off, or the quorum lost)
    cannot make the view look fresh. A turn is one poll interval: its poll is made, or left
    out (``skip``) when ``skips`` says the watch proved the view fresh. A poll is bounded by
    the call timeout; after polls whose bound passed while this client's own event loop ran
    late, by twice as much each time, up to ``STRETCH_MAX`` call timeouts
    (``backoff.Stretch``), until one is answered."""

    def __init__(self, store: StoreReader, *, cluster: str, call_timeout: float,
                 clock: Callable[[], float], linearizable_every: int = 10,
                 phase: int = 0) -> None:
        if linearizable_every < 1:
            raise ValueError("linearizable_every must be >= 1")
        if not 0 <= phase < linearizable_every:
            raise ValueError("phase must be in 0 .. linearizable_every - 1")
        self.store, self.cluster = store, cluster
        self.call_timeout = call_timeout
        self.clock = clock
        self.linearizable_every, self.phase = linearizable_every, phase
        self.state = FollowState()
        self.memo = regdoc.CardMemo()   # the last registry's card entries, by their content
        self.turns = 0                  # turns so far (polls made and polls left out)
        self.skipped = 0                # of which left out
        self._confirming = False        # a linearizable poll failed: the next ones are too
        # the poll's bound: the call timeout, stretched after polls whose bound passed (a
        # client whose own event loop runs late reads the answers after a fixed bound: no
        # poll would ever land); the first failure still comes within the call timeout
        self.stretch = Stretch(call_timeout, STRETCH_MAX * call_timeout)

    def serializable_next(self) -> bool:
        """Whether this turn's poll is a serializable read."""
        return not self._confirming and self.turns != 0 and (
            self.turns + self.phase) % self.linearizable_every != 0

    def skips(self, window: float) -> bool:
        """Whether this turn's poll may be left out: it would be serializable, the view has no
        problem, and a progress notification proved it fresh within ``window`` seconds."""
        st = self.state
        return (self.serializable_next() and not st.problem and st.last_progress is not None
                and self.clock() - st.last_progress < window)

    def proved_at_start(self) -> None:
        """The start's read was answered with no problem, and the registry watch opens from its
        revision: that answer proves the view fresh as a progress notification would, for the
        proof window from when it came (the first turns' serializable polls are left out
        until the watch's first notification proves it again: in a start storm, about one
        read a start less). Only the start's: a later answered poll is the backstop of a watch
        that may have gone silent, and proves nothing for the turns after it."""
        st = self.state
        if self.turns == 1 and st.last_ok is not None and not st.problem:
            self.state = replace(st, last_progress=st.last_ok)

    def skip(self) -> None:
        """This turn's poll is left out (``skips`` said so)."""
        self.turns += 1
        self.skipped += 1

    def progress(self, revision: int, *, by_event: bool = False) -> FollowStep:
        """Fold one progress notification of the watch, or a message of events that proves
        the same (``by_event``) (no I/O). Ignored while a linearizable poll is being
        confirmed: it says no more than a serializable answer."""
        if self._confirming:
            return FollowStep("unchanged", problem_before=self.state.problem)
        self.state, taken = step(self.state, Progress(revision, by_event), self.clock(),
                                 cluster=self.cluster)
        return taken

    def sync_history(self) -> bool:
        """Rebase on the store's history epoch; True when it changed (a new etcd history)."""
        before = self.state
        self.state = rebase(before, self.store.timeline_epoch)
        return self.state is not before

    async def poll(self) -> FollowStep:
        return (await self._poll(None))[0]

    async def start_read(self, also: KeyRead) -> tuple[FollowStep, ManyGot | None]:
        """The start's poll (the first turn's: linearizable, of the whole registry), with the
        key ``also`` read in the same request (``Store.read_many``: one read-only transaction,
        one revision): the step, and what ``read_many`` answered for ``also`` (None when the
        read failed: ask it again alone)."""
        if self.turns != 0 or self.state.seen_revision:
            raise ValueError("start_read is the first turn's poll")
        return await self._poll(also)

    async def _poll(self, also: KeyRead | None) -> tuple[FollowStep, ManyGot | None]:
        self.sync_history()
        since = self.state.seen_revision + 1 if self.state.seen_revision else None
        serializable = self.serializable_next()
        self.turns += 1
        answer: RangeResult | BaseException
        other: ManyGot | None = None
        bound = self.stretch.bound()
        try:
            # the store bounds the call; the outer bound is a second, independent fence
            async with asyncio.timeout(bound * 1.2 + 0.05):
                if also is None:
                    answer = await self.store.range(
                        keys.REGISTRY, min_mod_revision=since, serializable=serializable,
                        timeout=bound, max_value_bytes=bounds.REGISTRY_MAX_BYTES)
                else:
                    got = await self.store.read_many(
                        [KeyRead(keys.REGISTRY, bounds.REGISTRY_MAX_BYTES, ranged=True), also],
                        timeout=bound)
                    answer, other = _ranged(got[0]), got[1]
        except (StoreError, TimeoutError, OSError) as e:
            answer = e
        self.stretch.note(ran_late(answer))
        if self.store.timeline_epoch != self.state.epoch:
            # adopted during this poll (asked again in the new history): its answer is of the
            # new history, the revisions remembered are not
            self.state = rebase(self.state, self.store.timeline_epoch)
        self.state, taken = step(self.state, answer, self.clock(), cluster=self.cluster,
                                 memo=self.memo)
        self._confirming = not serializable and isinstance(answer, BaseException) and not (
            isinstance(answer, ValueTooLarge) and answer.mod_revision)
        return taken, other

    def on_event(self, event: WatchEvent) -> FollowStep:
        """Fold one watch event on ``registry`` (no I/O)."""
        self.state, taken = step(self.state, event, self.clock(), cluster=self.cluster,
                                 memo=self.memo)
        return taken

    def staleness(self) -> float | None:
        """Seconds since the last poll etcd answered (None: never answered)."""
        if self.state.last_ok is None:
            return None
        return max(0.0, self.clock() - self.state.last_ok)
