"""The steps that bring etcd's auth state to a plan (pure): converge, then nothing to do."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awide_cluster.access.apply import ROOT, Current, RootMissing, Step, stale, steps
from awide_cluster.access.plan import GatewayIdentity, Permission, access_plan

name = st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True)


def run(current: Current, todo: tuple[Step, ...]) -> Current:
    """What etcd would hold after the steps (its auth API's semantics, in short)."""
    users = {u: list(r) for u, r in current.users.items()}
    roles = {r: set(p) for r, p in current.roles.items()}
    for s in todo:
        if s.action == "add-role":
            assert s.name not in roles
            roles[s.name] = set()
        elif s.action == "grant-perm":
            assert s.perm is not None
            roles[s.name] = {p for p in roles[s.name]
                             if (p.key, p.range_end) != (s.perm.key, s.perm.range_end)}
            roles[s.name].add(s.perm)
        elif s.action == "revoke-perm":
            assert s.perm is not None
            roles[s.name].remove(s.perm)
        elif s.action == "add-user":
            assert s.name not in users
            users[s.name] = []
        elif s.action == "grant-role":
            assert s.role in roles
            users[s.name].append(s.role)
        elif s.action == "revoke-role":
            users[s.name].remove(s.role)
        elif s.action == "delete-user":
            del users[s.name]
        elif s.action == "delete-role":
            del roles[s.name]
    return Current({u: tuple(r) for u, r in users.items()},
                   {r: frozenset(p) for r, p in roles.items()})


@st.composite
def states(draw):
    cluster = draw(name)
    hosts = draw(st.lists(name, min_size=1, max_size=4, unique=True))
    gws = [GatewayIdentity(g, "ns") for g in draw(st.lists(name, max_size=3, unique=True))]
    plan = access_plan(cluster, hosts, gws, shared_gateways=draw(st.booleans()))
    # a partly provisioned etcd: some planned identities, stale ones, foreign ones
    users: dict[str, tuple[str, ...]] = {}
    roles: dict[str, frozenset[Permission]] = {}
    for u in plan.users:
        if draw(st.booleans()):
            users[u.name] = tuple(draw(st.lists(st.sampled_from([u.name, "other"]),
                                                max_size=2, unique=True)))
    for r in plan.roles:
        if draw(st.booleans()):
            keep = draw(st.lists(st.sampled_from(r.permissions), unique=True))
            wrong = [Permission(p.key, p.range_end, "READWRITE") for p in keep[:1]]
            roles[r.name] = frozenset(keep[1:] + wrong + [Permission.one("/x", "READ")])
    stale = f"host:{cluster}:retired"
    users[stale], roles[stale] = (stale,), frozenset()
    users["someone"], roles["other"] = ("other",), frozenset()
    if draw(st.booleans()):
        users[ROOT], roles[ROOT] = (ROOT,), frozenset()
    return plan, Current(users, roles)


@given(states())
def test_steps_converge_and_a_second_run_only_enables(s):
    plan, current = s
    kept = run(current, steps(plan, current, frozenset({ROOT})))
    assert f"host:{plan.cluster}:retired" in kept.users               # no prune: kept
    assert stale(plan, kept) == (f"host:{plan.cluster}:retired",)
    after = run(current, steps(plan, current, frozenset({ROOT}), prune=True))
    assert stale(plan, after) == ()
    for u in plan.users:
        assert after.users[u.name] == u.roles
    for r in plan.roles:
        assert after.roles[r.name] == frozenset(r.permissions)
    assert f"host:{plan.cluster}:retired" not in after.users
    assert "someone" in after.users and "other" in after.roles      # not ours: kept
    assert ROOT in after.users[ROOT]
    again = steps(plan, after, frozenset())
    assert again == (Step("enable-auth"),)
    assert steps(plan, after, frozenset(), enable=False) == ()


def test_root_needs_a_password_when_missing():
    plan = access_plan("c1", ["h1"])
    with pytest.raises(RootMissing, match="root"):
        steps(plan, Current({}, {}), frozenset())
    todo = steps(plan, Current({}, {}), frozenset({ROOT}))
    assert todo[:3] == (Step("add-role", ROOT), Step("add-user", ROOT),
                        Step("grant-role", ROOT, role=ROOT))
    assert todo[-1] == Step("enable-auth")
    assert "write members/h1" in " ".join(s.describe(plan.prefix) for s in todo)
