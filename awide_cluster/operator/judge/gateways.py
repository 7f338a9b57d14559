"""What the gateways and operators wrote, judged: gateway records against the registry's
generation and their namespace's layout, the gateways of a namespace against each other, and
the operators' intents. Pure functions; each returns its views and problems.

A gateway behind the registry is judged by how long this reader has seen it behind (its own
monotonic clock, across its reads), never by the leader's ``written_at``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import TypeVar

from awide_cluster.contract import keys, records
from awide_cluster.operator.freshness import Age, Observations
from awide_cluster.operator.model import GatewayRecordView, IntentView, Problem
from awide_cluster.operator.snapshot import StatusPolicy
from awide_cluster.store.types import KeyValue

Record = TypeVar("Record")


def decoded(kv: dict[str, KeyValue], prefix: str, decode: Callable[[bytes, str], Record]
            ) -> Iterator[tuple[str, str, Record | records.RecordError]]:
    """``(key, name, record or why it was refused)`` for every key under ``prefix``, in key
    order (``name``: the key after the prefix)."""
    for key, item in sorted(kv.items()):
        if key.startswith(prefix):
            name = keys.tail(key, prefix)
            try:
                yield key, name, decode(item.value, name)
            except records.RecordError as e:
                yield key, name, e


# ---------------------------------------------------------------------- gateways

def judge_gateways(
    kv: dict[str, KeyValue], seen: Observations, mono: float, generation: int | None,
    policy: StatusPolicy,
) -> tuple[tuple[GatewayRecordView, ...], list[Problem]]:
    """``generation``: the registry's (None: no registry read)."""
    problems: list[Problem] = []
    layouts: dict[str, records.LayoutRecord] = {}
    for _, ns, layout in decoded(kv, keys.LAYOUTS, records.decode_layout):
        if isinstance(layout, records.RecordError):
            problems.append(Problem("error", "layout_corrupt", ns, str(layout)))
        else:
            layouts[ns] = layout
    views: list[GatewayRecordView] = []
    for key, gid, g in decoded(kv, keys.GATEWAYS, records.decode_gateway):
        age = seen.age(key, mono)
        if isinstance(g, records.RecordError):
            problems.append(Problem("error", "gateway_record_corrupt", gid, str(g)))
            views.append(unread_gateway(gid, age, str(g)))
            continue
        views.append(gateway_view(g, age, generation))
        problems += gateway_problems(g, generation, layouts.get(g.namespace), seen, mono,
                                     policy)
    problems += agreement(views)
    views.sort(key=lambda v: (v.namespace, v.id))
    return tuple(views), problems


def gateway_view(g: records.GatewayRecord, age: Age | None, generation: int | None
                 ) -> GatewayRecordView:
    return GatewayRecordView(
        id=g.id, host=g.host, pod=g.pod, namespace=g.namespace, placement=g.placement,
        fingerprint=g.fingerprint, generation=g.generation,
        lag=generation - g.generation if generation is not None else None,
        engine=g.engine or "", version=g.version, stale=g.stale, age=age,
        refused=g.refused, refusing=g.refusing, last_refusal=g.last_refusal,
        state_age=g.state_age, state_since=g.state_since, state_until=g.state_until)


def unread_gateway(gid: str, age: Age | None, error: str) -> GatewayRecordView:
    """A gateway whose record was refused (corrupt, too large): its id and why."""
    return GatewayRecordView(
        id=gid, host="", pod="", namespace="", placement="", fingerprint="", generation=None,
        lag=None, engine="", version="", stale=False, age=age, error=error)


def gateway_problems(
    g: records.GatewayRecord, generation: int | None, layout: records.LayoutRecord | None,
    seen: Observations, mono: float, policy: StatusPolicy,
) -> list[Problem]:
    problems: list[Problem] = []
    if generation is not None and generation > g.generation:
        problems.append(behind(g, generation, seen, mono, policy))
    elif generation is not None and generation < g.generation:
        problems.append(Problem(
            "error", "gateway_ahead", g.id,
            f"gateway {g.id} says it applies generation {g.generation}, newer than the "
            f"registry's {generation}: the registry went back (restored etcd?)"))
    if g.stale:
        problems.append(Problem("warning", "gateway_stale_view", g.id,
                                f"gateway {g.id} says its registry view is stale (it cannot "
                                "read etcd; it keeps its last known cards)"))
    if g.refused:
        problems.append(refusals(g))
    if g.state_since:
        problems.append(served_state_file(g))
    if layout is not None and layout.placement != g.placement:
        problems.append(Problem(
            "error", "layout_mismatch", g.id,
            f"gateway {g.id} uses placement {g.placement}, namespace {g.namespace} is "
            f"recorded with {layout.placement} (by {layout.created_by or '?'})"))
    return problems


def refusals(g: records.GatewayRecord) -> Problem:
    """Registry entries the gateway refused (no host's report vouches for them): a warning
    that holds the exit code while some are refused now (``registry_forged``), a passing one
    naming the latest refusal once none is."""
    last = f"; latest: {g.last_refusal}" if g.last_refusal else ""
    if g.refusing:
        return Problem("warning", "registry_forged", g.id,
                       f"gateway {g.id} refuses {g.refusing} registry entries no host's report "
                       f"vouches for ({g.refused} refused since it started){last}")
    return Problem("warning", "entries_refused", g.id,
                   f"gateway {g.id} refused {g.refused} registry entries no host's report "
                   f"vouched for since it started, none now{last}")


def served_state_file(g: records.GatewayRecord) -> Problem:
    """The gateway served its state file at its start (etcd did not answer): a passing
    warning while it serves it, and for a while after etcd's registry replaced it (the
    gateway's record says so for a while, then no more)."""
    head = (f"gateway {g.id} ({g.host}/{g.pod}) started while etcd did not answer and served "
            f"its state file (saved {g.state_age} s before) from {g.state_since}")
    if not g.state_until:
        return Problem("warning", "gateway_state_file", g.id,
                       f"{head}: it still serves it, marked stale, until etcd answers it")
    since, until = records.parse_time(g.state_since), records.parse_time(g.state_until)
    took = f" ({until - since:.0f} s)" if since is not None and until is not None else ""
    return Problem("warning", "gateway_state_file", g.id,
                   f"{head} until {g.state_until}{took}, when etcd's registry replaced it")


def agreement(views: list[GatewayRecordView]) -> list[Problem]:
    """The gateways of a namespace must agree: one key layout fingerprint per registry
    generation, one placement (records that did not decode are not counted)."""
    by_group: dict[tuple[str, int | None], dict[str, list[str]]] = defaultdict(
        lambda: defaultdict(list))
    placements: dict[str, set[str]] = defaultdict(set)
    for v in views:
        if not v.error:
            by_group[(v.namespace, v.generation)][v.fingerprint].append(v.id)
            placements[v.namespace].add(v.placement)
    problems: list[Problem] = []
    for (ns, gen), prints in sorted(by_group.items(), key=lambda i: (i[0][0], i[0][1] or 0)):
        if len(prints) > 1:
            parts = "; ".join(f"{fp}: {', '.join(sorted(ids))}"
                              for fp, ids in sorted(prints.items()))
            problems.append(Problem(
                "error", "fingerprint_mismatch", ns,
                f"gateways of namespace {ns} at generation {gen} disagree on the key layout "
                f"fingerprint ({parts}): their cache hits are lost"))
    for ns, ps in sorted(placements.items()):
        if len(ps) > 1:
            problems.append(Problem("error", "placement_mismatch", ns,
                                    f"gateways of namespace {ns} use different placements: "
                                    f"{', '.join(sorted(ps))}"))
    return problems


def behind(g: records.GatewayRecord, generation: int, seen: Observations, mono: float,
           policy: StatusPolicy) -> Problem:
    """A gateway behind the registry: an error once this reader has seen it behind for
    ``behind_grace``, a passing warning before."""
    head = (f"gateway {g.id} ({g.host}/{g.pod}) applies registry generation {g.generation}, "
            f"{generation - g.generation} behind {generation}")
    behind_for = seen.behind_for(g.generation, generation, mono)
    if behind_for >= policy.behind_grace:
        return Problem("error", "gateway_behind", g.id,
                       f"{head}: seen behind for {behind_for:.1f} s by this reader (over "
                       f"{policy.behind_grace:g} s)")
    if seen.reads <= 1:
        how = "one read only: how long it lags is not measured yet"
    else:
        how = f"seen behind for {behind_for:.1f} s so far (within {policy.behind_grace:g} s)"
    return Problem("warning", "gateway_catching_up", g.id, f"{head}: {how}")


# ---------------------------------------------------------------------- intents

def judge_intents(kv: dict[str, KeyValue], seen: Observations, mono: float,
                  policy: StatusPolicy) -> tuple[tuple[IntentView, ...], list[Problem]]:
    views: list[IntentView] = []
    problems: list[Problem] = []
    for key, cid, rec in decoded(kv, keys.INTENTS, records.decode_intent):
        age = seen.age(key, mono)
        if key == keys.SWITCHOVER:          # a leader switchover, not a card's intent
            view, problem = switchover_view(kv[key], age)
            views.append(view)
            problems.append(problem)
            continue
        if isinstance(rec, records.RecordError):
            views.append(unread_intent(cid, age, str(rec)))
            problems.append(Problem("warning", "intent_corrupt", cid, str(rec)))
            continue
        views.append(IntentView(card_id=cid, action=rec.action, by=rec.by, age=age,
                                reason=rec.reason, at=rec.at))
        problems.append(pending(cid, rec, age, policy))
    return tuple(views), problems


def switchover_view(kv: KeyValue, age: Age | None) -> tuple[IntentView, Problem]:
    """``intents/switchover``: a request not answered yet, or a hand-over in progress."""
    name = keys.tail(keys.SWITCHOVER, keys.INTENTS)
    try:
        rec = records.decode_switchover(kv.value)
    except records.RecordError as e:
        return (unread_intent(name, age, str(e)),
                Problem("warning", "intent_corrupt", name, str(e)))
    who = f" by {rec.by}" if rec.by else ""
    if rec.granted:
        what = (f"leadership handed over by {rec.granted_by} to {rec.to}{who}: only "
                f"{rec.to} campaigns until it leads")
    else:
        what = (f"leader switchover{f' to {rec.to}' if rec.to else ''}{who}: not answered "
                "yet (the leader answers after its next poll cycle)")
    view = IntentView(card_id=name, action="switchover", by=rec.by, age=age,
                      reason=rec.reason, at=rec.at)
    return view, Problem("warning", "intent_pending", name, what)


def unread_intent(cid: str, age: Age | None, error: str) -> IntentView:
    return IntentView(card_id=cid, action="?", by="", age=age, error=error)


def pending(cid: str, rec: records.IntentRecord, age: Age | None,
            policy: StatusPolicy) -> Problem:
    """An intent not applied yet: an operator's action in flight, a warning until applied."""
    who = f" by {rec.by}" if rec.by else ""
    why = f" (reason: {rec.reason})" if rec.reason else ""
    if age is not None and age.at_least >= policy.stale_after:
        state = f"pending for {age.at_least:.0f} s by this reader's clock: is there a leader?"
    else:
        state = "not applied yet (the leader applies it at its next cycle)"
    return Problem("warning", "intent_pending", cid,
                   f"{rec.action} of card {cid}{who}{why}: {state}")
