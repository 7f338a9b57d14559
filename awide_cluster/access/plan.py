"""Least-privilege etcd access for one cluster: users, roles, permissions. Pure.

Every identity is one etcd user with one role of the same name; the name is also the Common
Name of that identity's client certificate (etcd maps a verified certificate's CN to the user
of that name for gRPC clients such as ``etcdctl``). Names carry the cluster, so several
clusters can share one etcd: ``host:<cluster>:<host>``, ``gateway:<cluster>:<gateway id>``,
``gateway:<cluster>`` (one role shared by every gateway), ``operator:<cluster>``,
``reader:<cluster>``. ``:`` is not allowed in any name segment (contract.keys.NAME_RE), so a
name belongs to exactly one identity.

What each may do, keys relative to the cluster prefix ``/awide/<cluster>/`` (contract/keys.py):

- every identity reads the whole prefix (and nothing outside it);
- a daemon (host ``h``) writes its own report ``members/h``, the ``leader`` key (its
  campaign), the ``registry``, the ``history`` ring (written in the registry's transaction)
  and ``intents/`` (the leader deletes consumed intents in the registry's transaction; etcd
  has no delete-only permission), the ``windows`` record and ``window-requests/`` (consumed
  like intents);
- a gateway ``g`` of namespace ``ns`` writes ``gateways/g`` and ``layouts/ns``; the shared
  gateway role writes every ``gateways/`` and ``layouts/`` key instead;
- the operator writes ``intents/`` (drain, undrain, forget) and ``window-requests/`` (pause,
  resume, host maintenance, silence, unsilence), nothing else (not ``windows``: the leader
  decides what is in force);
- the reader writes nothing.

etcd permissions are a key or a key range ``[key, range_end)``; a prefix is the range up to
the prefix with its last byte incremented.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from awide_cluster.contract import keys

PermType = Literal["READ", "WRITE", "READWRITE"]
Kind = Literal["host", "gateway", "gateways", "operator", "reader"]


class PlanError(ValueError):
    """Input that cannot make a plan (a bad or duplicate name), naming it."""


def prefix_end(key: str) -> str:
    """The ``range_end`` covering every key that starts with ``key`` (etcd's rule: the last
    byte incremented; keys here are ASCII, contract.keys.NAME_RE)."""
    if not key or not key.isascii() or key[-1] == "\x7f":
        raise PlanError(f"no prefix range for key {key!r}")
    return key[:-1] + chr(ord(key[-1]) + 1)


@dataclass(frozen=True, order=True)
class Permission:
    """``key`` alone (``range_end`` empty) or the range ``[key, range_end)``; absolute keys."""

    key: str
    range_end: str
    perm: PermType

    @classmethod
    def one(cls, key: str, perm: PermType) -> Permission:
        return cls(key, "", perm)

    @classmethod
    def under(cls, key: str, perm: PermType) -> Permission:
        return cls(key, prefix_end(key), perm)

    def covers(self, key: str) -> bool:
        if not self.range_end:
            return key == self.key
        return self.key <= key < self.range_end

    def reads(self) -> bool:
        return self.perm in ("READ", "READWRITE")

    def writes(self) -> bool:
        return self.perm in ("WRITE", "READWRITE")

    def describe(self, base: str = "") -> str:
        """``write members/h1``, ``read *`` (every key under ``base``), ``write intents/*``."""
        verb = {"READ": "read", "WRITE": "write", "READWRITE": "read+write"}[self.perm]
        rel = self.key[len(base):] if base and self.key.startswith(base) else self.key
        if not self.range_end:
            return f"{verb} {rel}"
        if self.range_end == prefix_end(self.key):
            return f"{verb} {rel}*"
        return f"{verb} [{rel}, {self.range_end})"


@dataclass(frozen=True)
class Role:
    name: str
    permissions: tuple[Permission, ...]

    def may(self, perm: Literal["READ", "WRITE"], key: str) -> bool:
        return any(p.covers(key) and (p.reads() if perm == "READ" else p.writes())
                   for p in self.permissions)


@dataclass(frozen=True)
class User:
    """``name`` is the etcd user and the CN of the identity's client certificate."""

    name: str
    kind: Kind
    roles: tuple[str, ...]


@dataclass(frozen=True)
class GatewayIdentity:
    gateway_id: str
    namespace: str


@dataclass(frozen=True)
class AccessPlan:
    cluster: str
    users: tuple[User, ...]
    roles: tuple[Role, ...]

    @cached_property
    def _by_name(self) -> dict[str, Role]:
        return {r.name: r for r in self.roles}

    def role(self, name: str) -> Role:
        return self._by_name[name]

    @property
    def prefix(self) -> str:
        return keys.prefix(self.cluster)

    def user(self, name: str) -> User:
        for u in self.users:
            if u.name == name:
                return u
        raise KeyError(name)

    def may(self, user: str, perm: Literal["READ", "WRITE"], key: str) -> bool:
        """Whether etcd lets ``user`` read/write the absolute ``key`` under this plan."""
        return any(self.role(r).may(perm, key) for r in self.user(user).roles)

    def owns(self, name: str) -> bool:
        """Whether ``name`` (an etcd user or role) is one of this cluster's identity names,
        planned or not (apply deletes the unplanned ones)."""
        return owner_cluster(name) == self.cluster


_SHAPES = {"host": (3,), "gateway": (2, 3), "operator": (2,), "reader": (2,)}


def owner_cluster(name: str) -> str | None:
    """The cluster of an identity name (``host:c1:h1`` -> ``c1``), None for other names."""
    parts = name.split(":")
    if len(parts) not in _SHAPES.get(parts[0], ()):
        return None
    if not all(keys.NAME_RE.fullmatch(p) for p in parts[1:]):
        return None
    return parts[1]


def host_user(cluster: str, host: str) -> str:
    return f"host:{cluster}:{host}"


def gateway_user(cluster: str, gateway_id: str | None = None) -> str:
    return f"gateway:{cluster}" if gateway_id is None else f"gateway:{cluster}:{gateway_id}"


def operator_user(cluster: str) -> str:
    return f"operator:{cluster}"


def reader_user(cluster: str) -> str:
    return f"reader:{cluster}"


def _checked(what: str, names: Iterable[str]) -> tuple[str, ...]:
    out = [keys.check_name(what, n) for n in names]
    dup = sorted({n for n in out if out.count(n) > 1})
    if dup:
        raise PlanError(f"{what} {dup[0]!r} is given twice")
    return tuple(sorted(out))


def access_plan(cluster: str, hosts: Iterable[str], gateways: Iterable[GatewayIdentity] = (),
                *, shared_gateways: bool = False) -> AccessPlan:
    """The users and roles of ``cluster``: one per daemon host, one per gateway (and/or one
    shared gateway identity), the operator and the reader. Raises PlanError/BadName."""
    base = keys.prefix(cluster)
    hosts = _checked("host", hosts)
    gws = tuple(gateways)
    _checked("gateway id", (g.gateway_id for g in gws))
    for g in gws:
        keys.check_name("namespace", g.namespace)
    gws = tuple(sorted(gws, key=lambda g: g.gateway_id))
    read_all = Permission.under(base, "READ")
    planned: list[tuple[User, tuple[Permission, ...]]] = []

    def add(name: str, kind: Kind, *writes: Permission) -> None:
        planned.append((User(name, kind, (name,)), (read_all, *sorted(set(writes)))))

    for h in hosts:
        add(host_user(cluster, h), "host",
            Permission.one(base + keys.member(h), "WRITE"),
            Permission.one(base + keys.LEADER, "WRITE"),
            Permission.one(base + keys.REGISTRY, "WRITE"),
            Permission.one(base + keys.HISTORY, "WRITE"),
            Permission.under(base + keys.INTENTS, "WRITE"),
            Permission.one(base + keys.WINDOWS, "WRITE"),
            Permission.under(base + keys.WINDOW_REQUESTS, "WRITE"))
    for g in gws:
        add(gateway_user(cluster, g.gateway_id), "gateway",
            Permission.one(base + keys.gateway(g.gateway_id), "WRITE"),
            Permission.one(base + keys.layout(g.namespace), "WRITE"))
    if shared_gateways:
        add(gateway_user(cluster), "gateways",
            Permission.under(base + keys.GATEWAYS, "WRITE"),
            Permission.under(base + keys.LAYOUTS, "WRITE"))
    add(operator_user(cluster), "operator", Permission.under(base + keys.INTENTS, "WRITE"),
        Permission.under(base + keys.WINDOW_REQUESTS, "WRITE"))
    add(reader_user(cluster), "reader")
    return AccessPlan(cluster=keys.check_name("cluster", cluster),
                      users=tuple(u for u, _ in planned),
                      roles=tuple(Role(u.name, perms) for u, perms in planned))


def render(plan: AccessPlan) -> list[str]:
    """One line per identity: user (= certificate CN), then what it may do."""
    base = plan.prefix
    lines = [f"cluster {plan.cluster}: keys under {base}; user = role = certificate CN"]
    for u in plan.users:
        perms = [p for r in u.roles for p in plan.role(r).permissions]
        lines.append(f"{u.name} ({u.kind}): " + "; ".join(p.describe(base) for p in perms))
    return lines


def identity_problem(username: str | None, cluster: str, expected: tuple[str, ...],
                     what: str) -> str | None:
    """Why ``username`` cannot serve ``what`` (e.g. "this daemon") of ``cluster`` under the
    access plan, or None. Names that are no identity of any cluster (``root``, a site's own
    user) are not judged: the plan does not know their roles."""
    owner = owner_cluster(username or "")
    if username is None or owner is None:
        return None
    if owner != cluster:
        return (f"{username!r} is an identity of cluster {owner!r}, not {cluster!r}: etcd "
                "would refuse every key of this cluster")
    if username not in expected:
        return (f"{username!r} is another identity's; {what}'s is "
                f"{' or '.join(repr(e) for e in expected)}: etcd would refuse its writes")
    return None
