"""Apply an access plan to etcd through its v3 JSON auth API (``/v3/auth/*``), idempotently.

``steps(plan, current, passwords)`` (pure) says what to change: the roles and users of the
plan, exactly its permissions and role grants, the ``root`` user and role (etcd demands them
before authentication can be enabled), with ``prune`` the identities of the same cluster the
plan no longer has deleted (a retired host), and authentication enabled last. ``AuthApi``
reads the current state and runs the steps, with the store's deadlines, TLS and credentials
(root's, once auth is on).

Passwords: a planned user gets the password given for it (a file per user, see the CLI);
a user without one gets a random password nobody keeps (it can still authenticate with a
client certificate whose CN is its name, through gRPC clients such as ``etcdctl``). Nothing
here logs or returns a password.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from awide_cluster.access.plan import AccessPlan, Permission, PermType
from awide_cluster.store.errors import BadResponse
from awide_cluster.store.etcd import EtcdStore

ROOT = "root"
_PERM_TYPES: dict[Any, PermType] = {None: "READ", "READ": "READ", 0: "READ",
                                     "WRITE": "WRITE", 1: "WRITE",
                                     "READWRITE": "READWRITE", 2: "READWRITE"}


@dataclass(frozen=True)
class Current:
    """What etcd holds now: users with their roles, roles with their permissions."""

    users: Mapping[str, tuple[str, ...]]
    roles: Mapping[str, frozenset[Permission]]


@dataclass(frozen=True)
class Step:
    """One auth API call: ``action`` on ``name``, with a role or a permission."""

    action: str     # add-role, grant-perm, revoke-perm, add-user, set-password, grant-role,
    #                 revoke-role, delete-user, delete-role, enable-auth
    name: str = ""
    role: str = ""
    perm: Permission | None = None

    def describe(self, base: str = "") -> str:
        what = {"add-role": "add role", "grant-perm": "grant role",
                "revoke-perm": "revoke from role",
                "add-user": "add user", "set-password": "set the password of user",
                "grant-role": "grant user", "revoke-role": "revoke from user",
                "delete-user": "delete user", "delete-role": "delete role",
                "enable-auth": "enable authentication"}[self.action]
        tail = ""
        if self.perm is not None:
            tail = f": {self.perm.describe(base)}"
        elif self.role:
            tail = f" role {self.role}"
        return f"{what} {self.name}{tail}".replace("  ", " ").strip()


class RootMissing(ValueError):
    """etcd has no root user and no password was given for one."""


def stale(plan: AccessPlan, current: Current) -> tuple[str, ...]:
    """Users and roles of the plan's cluster that etcd holds and the plan does not have (a
    retired host, or one left out of this run by mistake): deleted only with ``prune``."""
    planned = {u.name for u in plan.users} | {r.name for r in plan.roles}
    return tuple(sorted({n for n in (*current.users, *current.roles)
                         if plan.owns(n) and n not in planned}))


def steps(plan: AccessPlan, current: Current, passwords: frozenset[str], *,
          enable: bool = True, prune: bool = False) -> tuple[Step, ...]:
    """The calls that make etcd hold ``plan`` (nothing when it already does, but enabling).
    ``passwords``: the users a password is given for (set on existing users too).
    ``prune``: delete the ``stale`` users and roles too."""
    out: list[Step] = []
    if ROOT not in current.roles:
        out.append(Step("add-role", ROOT))
    if ROOT not in current.users:
        if ROOT not in passwords:
            raise RootMissing("etcd has no root user yet: give its password (a file named "
                              "'root' in the passwords directory)")
        out.append(Step("add-user", ROOT))      # an existing root's password is left alone
    if ROOT not in current.users.get(ROOT, ()):
        out.append(Step("grant-role", ROOT, role=ROOT))
    for role in plan.roles:
        have = current.roles.get(role.name)
        if have is None:
            out.append(Step("add-role", role.name))
            have = frozenset()
        want = set(role.permissions)
        ranges = {(p.key, p.range_end) for p in want}
        out += [Step("revoke-perm", role.name, perm=p) for p in sorted(have)
                if (p.key, p.range_end) not in ranges]
        out += [Step("grant-perm", role.name, perm=p) for p in sorted(want - have)]
    for user in plan.users:
        has = current.users.get(user.name)
        if has is None:
            out.append(Step("add-user", user.name))
            has = ()
        elif user.name in passwords:
            out.append(Step("set-password", user.name))
        out += [Step("revoke-role", user.name, role=r) for r in sorted(set(has) - set(user.roles))]
        out += [Step("grant-role", user.name, role=r) for r in user.roles if r not in has]
    if prune:
        gone = set(stale(plan, current))
        out += [Step("delete-user", u) for u in sorted(gone & set(current.users))]
        out += [Step("delete-role", r) for r in sorted(gone & set(current.roles))]
    if enable:
        out.append(Step("enable-auth"))
    return tuple(out)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _unb64(raw: Any, what: str) -> str:
    if raw is None:
        return ""
    try:
        return base64.b64decode(str(raw), validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        raise BadResponse(f"{what}: not base64 text") from None


def _names(answer: Mapping[str, Any], field: str, what: str) -> tuple[str, ...]:
    raw = answer.get(field) or []
    if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
        raise BadResponse(f"{what}: {field} is not a list of names")
    return tuple(raw)


class AuthApi:
    """The auth calls, through an ``EtcdStore`` (its deadlines, TLS, token handling)."""

    def __init__(self, store: EtcdStore, timeout: float) -> None:
        self.store, self.timeout = store, timeout

    async def _call(self, path: str, body: dict[str, Any], *, write: bool) -> dict[str, Any]:
        call = self.store.write if write else self.store.read
        _, answer = await call(path, body, self.timeout, path.removeprefix("/v3/"))
        return answer

    async def current(self) -> Current:
        users = _names(await self._call("/v3/auth/user/list", {}, write=False), "users",
                       "user list")
        roles = _names(await self._call("/v3/auth/role/list", {}, write=False), "roles",
                       "role list")
        have_users = {}
        for u in users:
            got = await self._call("/v3/auth/user/get", {"name": u}, write=False)
            have_users[u] = _names(got, "roles", f"user {u}")
        have_roles = {}
        for r in roles:
            got = await self._call("/v3/auth/role/get", {"role": r}, write=False)
            perms = got.get("perm") or []
            if not isinstance(perms, list):
                raise BadResponse(f"role {r}: perm is not a list")
            out = set()
            for p in perms:
                if not isinstance(p, dict) or p.get("permType") not in _PERM_TYPES:
                    raise BadResponse(f"role {r}: a permission that does not decode")
                out.add(Permission(_unb64(p.get("key"), f"role {r}"),
                                   _unb64(p.get("range_end"), f"role {r}"),
                                   _PERM_TYPES[p.get("permType")]))
            have_roles[r] = frozenset(out)
        return Current(have_users, have_roles)

    async def run(self, step: Step, passwords: Mapping[str, str]) -> None:
        a, name = step.action, step.name
        if a == "add-role":
            await self._call("/v3/auth/role/add", {"name": name}, write=True)
        elif a in ("grant-perm", "revoke-perm"):
            assert step.perm is not None
            p = step.perm
            if a == "grant-perm":
                body: dict[str, Any] = {"name": name, "perm": {
                    "permType": p.perm, "key": _b64(p.key), "range_end": _b64(p.range_end)}}
                await self._call("/v3/auth/role/grant", body, write=True)
            else:
                await self._call("/v3/auth/role/revoke", {"role": name, "key": _b64(p.key),
                                                          "range_end": _b64(p.range_end)},
                                 write=True)
        elif a in ("add-user", "set-password"):
            # no password given: a random one nobody keeps (certificate-only identity)
            pw = passwords.get(name) or secrets.token_urlsafe(32)
            path = "/v3/auth/user/add" if a == "add-user" else "/v3/auth/user/changepw"
            await self._call(path, {"name": name, "password": pw}, write=True)
        elif a == "grant-role":
            await self._call("/v3/auth/user/grant", {"user": name, "role": step.role},
                             write=True)
        elif a == "revoke-role":
            await self._call("/v3/auth/user/revoke", {"name": name, "role": step.role},
                             write=True)
        elif a == "delete-user":
            await self._call("/v3/auth/user/delete", {"name": name}, write=True)
        elif a == "delete-role":
            await self._call("/v3/auth/role/delete", {"role": name}, write=True)
        elif a == "enable-auth":
            await self._call("/v3/auth/enable", {}, write=True)
        else:
            raise ValueError(f"unknown step {a!r}")


@dataclass(frozen=True)
class Applied:
    steps: tuple[Step, ...]     # taken (or, dry run, to take)
    kept: tuple[str, ...]       # stale names left in place (no prune)


async def apply(api: AuthApi, plan: AccessPlan, passwords: Mapping[str, str], *,
                enable: bool = True, dry_run: bool = False, prune: bool = False) -> Applied:
    """Bring etcd to ``plan``: the steps taken (or, ``dry_run``, to take)."""
    current = await api.current()
    todo = steps(plan, current, frozenset(passwords), enable=enable, prune=prune)
    if not dry_run:
        for step in todo:
            await api.run(step, passwords)
    return Applied(todo, () if prune else stale(plan, current))
