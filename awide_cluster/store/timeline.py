"""Which etcd history a client follows: one member gone back in time, or a deliberate restore.

A client remembers the history it follows (``Timeline``): etcd's cluster id and the highest
revision it has seen (the floor). Every answer is admitted or refused (``admit``): an answer
from another cluster id, or below the floor seen before the call was sent, is refused; that is
*that member's* problem (a lagging or stale member, a wrong endpoint) and the call moves on to
another member.

A refused answer makes the store take a census (``assess_census``): the status of every
configured member at once. The client adopts a new history only when at least a quorum of the
configured members answer, *every* member that answers is in the new history (another cluster
id, or a revision below the floor), and they agree on its cluster id. Then the floor is reset
to the census's highest revision and ``epoch`` grows by one: every reader that remembers a
revision (watches, the registry followers, the refusal memory) compares its epoch with the
store's and starts again from the new history when they differ. One member still at or above
the floor in the old cluster keeps the old history: a member that went back in time never moves
a client.

Pure: frozen values in, frozen values out. The I/O (the status of every member) is the store's
(``Session.reconsider_timeline``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal


@dataclass(frozen=True, slots=True)
class Claim:
    """What one answer's header says: the cluster id (0: not said) and the revision."""

    cluster_id: int
    revision: int


@dataclass(frozen=True, slots=True)
class Timeline:
    cluster_id: int = 0     # etcd's cluster id (0 until the first answer that names one)
    floor: int = 0          # the highest revision seen in this history
    epoch: int = 0          # new histories adopted so far


Admission = Literal["ok", "foreign", "behind"]


def admit(current: Timeline, sent: Timeline, claim: Claim) -> tuple[Timeline, Admission]:
    """One answer to a call sent when the history was ``sent``: accepted (the floor raised)
    or refused as from another cluster (``foreign``) or below the floor (``behind``).
    A call sent before the history changed is judged by the cluster id only."""
    if current.cluster_id and claim.cluster_id and claim.cluster_id != current.cluster_id:
        return current, "foreign"
    floor = sent.floor if sent.epoch == current.epoch else 0
    if claim.revision and claim.revision < floor:
        return current, "behind"
    cluster = current.cluster_id or claim.cluster_id
    return replace(current, cluster_id=cluster, floor=max(current.floor, claim.revision)), "ok"


def why(admission: Admission, current: Timeline, sent: Timeline, claim: Claim) -> str:
    """The refusal's words (for ``RevisionWentBack``)."""
    if admission == "foreign":
        return (f"answered for etcd cluster {claim.cluster_id:x}, not cluster "
                f"{current.cluster_id:x} followed")
    return (f"answered at revision {claim.revision}, below revision {sent.floor} already "
            "seen")


CensusOutcome = Literal["adopted", "kept", "undecided"]


@dataclass(frozen=True, slots=True)
class CensusResult:
    outcome: CensusOutcome
    reason: str


def quorum(members: int) -> int:
    return members // 2 + 1


def assess_census(current: Timeline, census: Sequence[tuple[str, Claim | None]]
           ) -> tuple[Timeline, CensusResult]:
    """The status of every configured member (``None``: it did not answer), against the
    history followed: ``adopted`` (a new history, the floor reset), ``kept`` (a member still
    serves this history: the refusals were those members' problem) or ``undecided`` (too few
    answers, or members that disagree: ask again at the next refusal)."""
    answered = [(ep, c) for ep, c in census if c is not None]
    here = [ep for ep, c in answered
            if (not c.cluster_id or not current.cluster_id or c.cluster_id == current.cluster_id)
            and c.revision >= current.floor]
    if here:
        return current, CensusResult("kept", f"{here[0]} still serves etcd cluster "
                                        f"{current.cluster_id:x} at or above revision "
                                        f"{current.floor}")
    need = quorum(len(census))
    if len(answered) < need:
        return current, CensusResult("undecided", f"{len(answered)} of {len(census)} members "
                                             f"answered, {need} needed to adopt a new history")
    ids = {c.cluster_id for _, c in answered}
    if len(ids) != 1:
        shown = ", ".join(f"{i:x}" for i in sorted(ids))
        return current, CensusResult("undecided", f"members answer for different etcd clusters "
                                             f"({shown})")
    cluster = ids.pop() or current.cluster_id
    top = max(c.revision for _, c in answered)
    new = Timeline(cluster_id=cluster, floor=top, epoch=current.epoch + 1)
    what = (f"a new cluster id {cluster:x} (was {current.cluster_id:x})"
            if cluster != current.cluster_id else f"cluster id {cluster:x}")
    return new, CensusResult("adopted", f"{len(answered)} of {len(census)} etcd members answer "
                                   f"{what} at revision {top} (revision {current.floor} seen "
                                   "before): a restored or rebuilt etcd; following the new "
                                   "history")
