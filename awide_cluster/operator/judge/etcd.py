"""etcd's health as status shows it, judged in phases, each pure:

1. ``roll_call``: one row per endpoint answer and per member no endpoint reaches;
2. ``count_members`` and ``judge_quorum``: how many members are up with a raft leader, and
   whether that is a majority (``ok``), not (``lost``) or cannot be told (``unknown``);
3. ``member_problems``: members down, cut off, disagreeing, too few, version skew;
4. ``judge_alarms``: etcd's alarm list (NOSPACE by name, any other alarm generically);
5. ``judge_space``: members whose database is near their backend quota.

``judge_etcd`` runs them in that order and builds the ``EtcdView``.
"""

from __future__ import annotations

from dataclasses import dataclass

from awide_cluster.operator.model import (
    EtcdAlarmView,
    EtcdMemberView,
    EtcdView,
    Problem,
    Quorum,
)
from awide_cluster.operator.snapshot import EndpointAnswer, RawSnapshot
from awide_cluster.store.types import Alarm, EndpointStatus, Member


@dataclass(frozen=True, slots=True)
class RollCall:
    rows: tuple[EtcdMemberView, ...]        # answers in order, then members not asked
    answered: tuple[EndpointStatus, ...]    # one per member that answered (its last answer)
    unchecked: int                          # members no endpoint given reaches


@dataclass(frozen=True, slots=True)
class MemberCount:
    answered: int               # members that answered
    up: int                     # ... and see a raft leader
    total: int                  # members of the cluster (member list, else endpoints given)
    unchecked: int              # members not asked (not among the endpoints)

    @property
    def majority(self) -> int:
        return self.total // 2 + 1


def judge_etcd(raw: RawSnapshot) -> tuple[EtcdView, tuple[Problem, ...]]:
    by_id = {m.id: m for m in raw.members or ()}
    roll = roll_call(raw.answers, raw.members, raw.endpoints)
    count = count_members(roll, raw.members, raw.endpoints)
    quorum, quorum_problem = judge_quorum(count, first_error(raw))
    problems = [quorum_problem] if quorum_problem is not None else []
    problems += member_problems(roll, by_id, quorum, raw.members, margin=quorum_margin(count))
    alarms, alarm_problems = judge_alarms(raw.alarms, raw.alarms_error, by_id, quorum)
    problems += alarm_problems
    problems += judge_space(roll.rows)
    leader_id = raft_leader(roll.answered)
    terms = [st.raft_term for st in roll.answered]
    view = EtcdView(
        quorum=quorum, up=count.up, total=count.total,
        leader=_member_name(leader_id, by_id) if leader_id else "",
        raft_term=max(terms) if terms else None,
        members=tuple(sorted(roll.rows, key=lambda r: (r.name, r.endpoint))),
        alarms=alarms, alarms_error=raw.alarms_error if raw.alarms is None else "",
        margin=quorum_margin(count) if count.answered else "")
    return view, tuple(problems)


# ---------------------------------------------------------------------- 1. roll call

def roll_call(answers: tuple[EndpointAnswer, ...], members: tuple[Member, ...] | None,
              endpoints: tuple[str, ...]) -> RollCall:
    by_id = {m.id: m for m in members or ()}
    rows: list[EtcdMemberView] = []
    answered: dict[int, EndpointStatus] = {}
    for a in answers:
        if a.status is None:
            rows.append(_silent_row(a.endpoint, _member_at(members, a.endpoint), a.error))
        else:
            answered[a.status.member_id] = a.status
            rows.append(_answered_row(a.endpoint, a.status, by_id.get(a.status.member_id),
                                      a.quota))
    not_asked = [m for m in members or ()
                 if m.id not in answered and not _reached(m, endpoints)]
    rows += [_unasked_row(m) for m in not_asked]
    return RollCall(rows=tuple(rows), answered=tuple(answered.values()),
                    unchecked=len(not_asked))


def _answered_row(endpoint: str, st: EndpointStatus, member: Member | None,
                  quota: int | None = None) -> EtcdMemberView:
    return EtcdMemberView(
        name=(member.name if member is not None else "") or f"{st.member_id:x}",
        id=f"{st.member_id:x}", endpoint=endpoint, reachable=True,
        is_leader=st.leader != 0 and st.leader == st.member_id,
        raft_term=st.raft_term, raft_index=st.raft_index, version=st.version,
        db_size=st.db_size, error="; ".join(st.errors), db_size_in_use=st.db_size_in_use,
        quota=quota)


def _silent_row(endpoint: str, member: Member | None, error: str) -> EtcdMemberView:
    return EtcdMemberView(
        name=member.name if member is not None else "",
        id=f"{member.id:x}" if member else "", endpoint=endpoint, reachable=False,
        is_leader=False, raft_term=None, raft_index=None, version="", db_size=None, error=error)


def _unasked_row(member: Member) -> EtcdMemberView:
    return EtcdMemberView(
        name=member.name, id=f"{member.id:x}", endpoint=",".join(member.client_urls),
        reachable=False, is_leader=False, raft_term=None, raft_index=None, version="",
        db_size=None, error="not checked: not among the endpoints given")


# ---------------------------------------------------------------------- 2. quorum

def count_members(roll: RollCall, members: tuple[Member, ...] | None,
                  endpoints: tuple[str, ...]) -> MemberCount:
    """Voting members only: a learner (a member being added) has no share of the quorum."""
    learners = {m.id for m in members or () if m.is_learner}
    return MemberCount(
        answered=len(roll.answered),
        up=sum(1 for st in roll.answered if st.leader != 0 and st.member_id not in learners),
        total=len(members) - len(learners) if members else len(endpoints),
        unchecked=roll.unchecked)


def judge_quorum(count: MemberCount, first_error: str) -> tuple[Quorum, Problem | None]:
    """``ok``: a majority is up with a raft leader; ``unknown``: nobody answered, or the
    members not asked could make the majority; ``lost`` otherwise."""
    if not count.answered:
        return "unknown", Problem("error", "etcd_unreachable", "etcd",
                                  "no etcd member answered: " + first_error)
    if count.up >= count.majority:
        return "ok", None
    if count.up + count.unchecked >= count.majority:
        return "unknown", Problem(
            "warning", "quorum_unknown", "etcd",
            f"{count.up} of {count.total} members seen with a leader; {count.unchecked} not "
            "checked (give every member's endpoint)")
    return "lost", Problem(
        "error", "quorum_lost", "etcd",
        f"etcd quorum lost: {count.up} of {count.total} members up with a raft leader, "
        f"{count.majority} needed; no writes are possible (gateways keep their last known "
        "cards)")


def raft_leader(answered: tuple[EndpointStatus, ...]) -> int:
    """The raft leader the answering members agree on, 0 when none or they disagree."""
    leaders = {st.leader for st in answered if st.leader != 0}
    return next(iter(leaders)) if len(leaders) == 1 else 0


# ---------------------------------------------------------------------- 3. members

def quorum_margin(count: MemberCount) -> str:
    """How many more member failures the quorum survives, in words."""
    spare = count.up - count.majority
    head = f"{count.up} of {count.total} members up"
    if spare < 0:
        return f"{head}, {count.majority} needed"
    if spare == 0:
        return f"{head}; one more failure loses writes"
    return f"{head}; {'one more failure' if spare == 1 else f'{spare} more failures'} tolerated"


def member_problems(roll: RollCall, by_id: dict[int, Member], quorum: Quorum,
                    members: tuple[Member, ...] | None, *, margin: str = "") -> list[Problem]:
    """A member down is a warning while the quorum holds (the cluster works, with less
    margin: said in the message), an error otherwise."""
    problems: list[Problem] = []
    for r in roll.rows:
        if r.reachable or r.error.startswith("not checked"):
            continue
        said = f"etcd member {r.name or '?'} at {r.endpoint} does not answer: {r.error}"
        if quorum == "ok":
            problems.append(Problem("warning", "etcd_member_down", r.name or r.endpoint,
                                    said + (f" (quorum kept: {margin})" if margin else "")))
        else:
            problems.append(Problem("error", "etcd_member_down", r.name or r.endpoint, said))
    if quorum == "ok":                      # a minority member cut off from the others
        for st in roll.answered:
            if st.leader == 0:
                name = by_id[st.member_id].name if st.member_id in by_id else st.endpoint
                problems.append(Problem("error", "etcd_no_raft_leader", name,
                                        f"etcd member {name} at {st.endpoint} sees no raft "
                                        "leader (cut off from the others?)"))
    if len({st.leader for st in roll.answered if st.leader != 0}) > 1:
        problems.append(Problem("warning", "etcd_leader_disagreement", "etcd",
                                "members name different raft leaders (an election is going on)"))
    voters = [m for m in members or () if not m.is_learner]
    if members is not None and 0 < len(voters) < 3:
        learners = len(members) - len(voters)
        extra = f" and {learners} learner(s), which do not vote" if learners else ""
        problems.append(Problem("warning", "etcd_too_small", "etcd",
                                f"etcd has {len(voters)} voting member(s){extra}: it tolerates "
                                "no member failure (3 or more are needed for that)"))
    versions = sorted({r.version for r in roll.rows if r.version})
    if len(versions) > 1:
        problems.append(Problem("warning", "etcd_version_skew", "etcd",
                                f"members run different etcd versions: {', '.join(versions)}"))
    return problems


# ---------------------------------------------------------------------- 4. alarms

def judge_alarms(alarms: tuple[Alarm, ...] | None, alarms_error: str, by_id: dict[int, Member],
                 quorum: Quorum) -> tuple[tuple[EtcdAlarmView, ...], list[Problem]]:
    """etcd's alarm list: NOSPACE (every write refused) by name, any other alarm generically."""
    if alarms is None:
        if quorum != "ok":
            return (), []
        return (), [Problem("warning", "etcd_alarms_unread", "etcd",
                            f"cannot read etcd's alarm list: {alarms_error}")]
    views = sorted((EtcdAlarmView(alarm=a.alarm, member=_member_name(a.member_id, by_id))
                    for a in alarms if a.alarm not in ("", "NONE")),
                   key=lambda v: (v.alarm, v.member))
    problems: list[Problem] = []
    nospace = sorted({v.member for v in views if v.alarm == "NOSPACE"})
    if nospace:
        problems.append(Problem(
            "error", "etcd_alarm_nospace", "etcd",
            f"etcd's NOSPACE alarm is raised (by {', '.join(nospace)}): its backend quota is "
            "full and it refuses every write until space is freed and the alarm disarmed "
            "(runbook: compact, defragment each member, alarm disarm); reads still work"))
    for kind in sorted({v.alarm for v in views if v.alarm != "NOSPACE"}):
        who = ", ".join(sorted(v.member for v in views if v.alarm == kind))
        runbook = _ALARM_RUNBOOK.get(kind, "see etcd's log")
        problems.append(Problem("error", "etcd_alarm", kind,
                                f"etcd alarm {kind} raised by {who} ({runbook})"))
    return tuple(views), problems


_ALARM_RUNBOOK = {
    "CORRUPT": ("a member's data differs from the others': etcd refuses writes; see etcd's "
                "log for the member, replace it from a healthy one or restore a backup "
                "(runbook: docs/operations.md)"),
}


# ---------------------------------------------------------------------- 5. space

NEAR_QUOTA = 0.8    # a member's database this full (of its quota) is a warning


def judge_space(rows: tuple[EtcdMemberView, ...]) -> list[Problem]:
    """``etcd_db_near_quota`` for each member whose database file is at least ``NEAR_QUOTA``
    of its backend quota (when both are known): at the quota etcd raises NOSPACE and refuses
    every write. The message says whether a defragmentation alone would free the space
    (much of the file not in use) or history must be compacted first."""
    problems: list[Problem] = []
    for r in rows:
        if r.db_size is None or not r.quota or r.db_size < NEAR_QUOTA * r.quota:
            continue
        if r.db_size_in_use is not None and r.db_size_in_use < NEAR_QUOTA * r.quota:
            fix = (f"{size_text(r.db_size_in_use)} of it in use: defragment the member "
                   "(awide-etcd-defrag.service)")
        else:
            fix = "compact etcd's history, then defragment each member"
        problems.append(Problem(
            "warning", "etcd_db_near_quota", r.name or r.endpoint,
            f"etcd member {r.name or r.endpoint}'s database is {size_text(r.db_size)}, "
            f"{100 * r.db_size / r.quota:.0f}% of its quota of {size_text(r.quota)}: at the "
            f"quota etcd refuses every write (NOSPACE); {fix} (runbook: docs/operations.md)"))
    return problems


def size_text(n: int) -> str:
    """Bytes as MiB (or GiB), one decimal."""
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f} GiB"
    return f"{n / (1 << 20):.1f} MiB"


# ---------------------------------------------------------------------- helpers

def _member_name(member_id: int, by_id: dict[int, Member]) -> str:
    m = by_id.get(member_id)
    return m.name if m is not None else f"{member_id:x}"


def _same(url: str, endpoint: str) -> bool:
    return url.rstrip("/") == endpoint.rstrip("/")


def _reached(member: Member, endpoints: tuple[str, ...]) -> bool:
    return any(_same(u, e) for u in member.client_urls for e in endpoints)


def _member_at(members: tuple[Member, ...] | None, endpoint: str) -> Member | None:
    for m in members or ():
        if any(_same(u, endpoint) for u in m.client_urls):
            return m
    return None


def first_error(raw: RawSnapshot) -> str:
    for a in raw.answers:
        if a.error:
            return f"{a.endpoint}: {a.error}"
    return raw.read_error or "no answer"
