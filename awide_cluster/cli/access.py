"""``awide-cluster access plan`` / ``access apply``: least-privilege etcd users and roles of
one cluster (awide_cluster/access, docs/security.md "etcd roles").

Exit codes: 0 done (plan printed, etcd holds the plan); 1 etcd refused a call (e.g. not
root's credentials); 2 usage or config error; 3 etcd unreachable.
"""

from __future__ import annotations

import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from awide_cluster.cli.lookup import (
    EXIT_UNHEALTHY,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    fail,
    resolve,
    target_options,
)
from awide_cluster.cli.main import cli

if TYPE_CHECKING:
    from awide_cluster.access.plan import AccessPlan
    from awide_cluster.operator.target import ClusterTarget

MAX_PASSWORD_BYTES = 1024


@cli.group()
def access() -> None:
    """Least-privilege etcd users and roles of a cluster (user = certificate CN)."""


def _plan_options(f: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.option("--host", "hosts", multiple=True,
                     help="a daemon host of the cluster (repeat, or comma-separated) "
                          "[default: the hosts of a daemon config]"),
        click.option("--gateway", "gateways", multiple=True,
                     help="a gateway as ID=NAMESPACE: its own user (repeat, or "
                          "comma-separated)"),
        click.option("--shared-gateways", is_flag=True,
                     help="also one user for every gateway (gateway:<cluster>), writing any "
                          "gateways/ and layouts/ key"),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return target_options(f)


def _split(values: tuple[str, ...]) -> list[str]:
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def _make_plan(target: ClusterTarget, hosts: tuple[str, ...], gateways: tuple[str, ...],
               shared: bool) -> AccessPlan:
    from awide_cluster.access.plan import GatewayIdentity, PlanError, access_plan
    from awide_cluster.contract.keys import BadName
    names = _split(hosts) or list(target.hosts)
    if not names:
        fail("say which daemon hosts: --host h1,h2,... (or --config with a daemon config "
             "listing hosts)", EXIT_USAGE)
    gws = []
    for g in _split(gateways):
        gid, sep, ns = g.partition("=")
        if not sep:
            fail(f"--gateway {g!r}: give ID=NAMESPACE", EXIT_USAGE)
        gws.append(GatewayIdentity(gid, ns))
    try:
        return access_plan(target.cluster, names, gws, shared_gateways=shared)
    except (PlanError, BadName) as e:
        fail(str(e), EXIT_USAGE)


@access.command("plan")
@_plan_options
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
def plan_cmd(config: str | None, endpoints: str | None, cluster: str | None,
             call_timeout: float | None, hosts: tuple[str, ...], gateways: tuple[str, ...],
             shared_gateways: bool, fmt: str) -> None:
    """Print the users, roles and key permissions of the cluster (nothing is changed)."""
    import dataclasses
    import json

    from awide_cluster.access.plan import render
    target, _ = resolve(config, endpoints, cluster, call_timeout)
    plan = _make_plan(target, hosts, gateways, shared_gateways)
    if fmt == "json":
        click.echo(json.dumps({"cluster": plan.cluster, "prefix": plan.prefix,
                               "users": [dataclasses.asdict(u) for u in plan.users],
                               "roles": [dataclasses.asdict(r) for r in plan.roles]},
                              indent=2))
    else:
        click.echo("\n".join(render(plan)))


def read_passwords(directory: str | None, names: list[str]) -> dict[str, str]:
    """``DIR/<user>`` for each name that has a file there; exit 64 on a file others can
    read, an empty or oversized one. Contents are never shown."""
    if directory is None:
        return {}
    d = Path(directory)
    if not d.is_dir():
        fail(f"--passwords {directory}: not a directory", EXIT_USAGE)
    out = {}
    for name in names:
        f = d / name
        if not f.is_file():
            continue
        mode = f.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            fail(f"password file {f} is readable by others (mode {stat.S_IMODE(mode):o}): "
                 "chmod 600", EXIT_USAGE)
        raw = f.read_bytes()
        text = raw.decode(errors="replace").strip()
        if not text or len(raw) > MAX_PASSWORD_BYTES:
            fail(f"password file {f}: empty or over {MAX_PASSWORD_BYTES} bytes", EXIT_USAGE)
        out[name] = text
    return out


@access.command("apply")
@_plan_options
@click.option("--passwords", "password_dir", type=click.Path(file_okay=False), default=None,
              help="directory of password files named by user (mode 0600): 'root' (the "
                   "credentials used, and root's password when etcd has no root user yet) "
                   "and any planned user that authenticates by password")
@click.option("--no-enable", is_flag=True, help="leave authentication as it is")
@click.option("--dry-run", is_flag=True, help="print the steps, change nothing")
@click.option("--prune", is_flag=True,
              help="delete this cluster's users and roles that the plan does not have (a "
                   "retired host or gateway); without it they are listed and kept")
def apply_cmd(config: str | None, endpoints: str | None, cluster: str | None,
              call_timeout: float | None, hosts: tuple[str, ...], gateways: tuple[str, ...],
              shared_gateways: bool, password_dir: str | None, no_enable: bool,
              dry_run: bool, prune: bool) -> None:
    """Make etcd hold the plan: roles with exactly their permissions, users with their
    roles, the root user, with --prune this cluster's retired identities deleted, then
    authentication enabled (last). Idempotent: a second run changes nothing. Prints one line
    per change."""
    import asyncio
    import dataclasses

    from awide_cluster.access.apply import ROOT, AuthApi, RootMissing, apply
    from awide_cluster.store.errors import Denied, StoreError, Unavailable
    from awide_cluster.store.etcd import EtcdStore

    target, store_config = resolve(config, endpoints, cluster, call_timeout)
    plan = _make_plan(target, hosts, gateways, shared_gateways)
    passwords = read_passwords(password_dir, [ROOT, *(u.name for u in plan.users)])
    plain = [(i, e) for i, e in enumerate(store_config.endpoints) if e.startswith("http://")]
    if passwords and plain:
        fail(f"--passwords with endpoint {plain[0][0]} {plain[0][1]!r} on plain http: the "
             "passwords would travel in clear; every endpoint must be https://", EXIT_USAGE)
    if ROOT in passwords:
        store_config = dataclasses.replace(store_config, username=ROOT,
                                           password=passwords[ROOT])
    # auth calls cost etcd a bcrypt hash each (user add, change password): a longer bound
    timeout = max(store_config.call_timeout, 5.0)

    async def main() -> tuple[list[str], tuple[str, ...]]:
        async with EtcdStore(store_config) as store:
            done = await apply(AuthApi(store, timeout), plan, passwords, enable=not no_enable,
                               dry_run=dry_run, prune=prune)
        return [s.describe(plan.prefix) for s in done.steps], done.kept

    try:
        lines, kept = asyncio.run(main())
    except RootMissing as e:
        fail(str(e), EXIT_USAGE)
    except Denied as e:
        fail(f"etcd refused: {e} (apply needs root's credentials: --passwords DIR with "
             "DIR/root)", EXIT_UNHEALTHY)
    except Unavailable as e:
        fail(f"etcd unreachable: {e}", EXIT_UNREACHABLE)
    except StoreError as e:
        fail(f"etcd: {type(e).__name__}: {e}", EXIT_UNHEALTHY)
    except KeyboardInterrupt:
        sys.exit(EXIT_UNHEALTHY)
    verb = "would" if dry_run else "did"
    for line in lines:
        click.echo(f"{verb}: {line}")
    for name in kept:
        click.echo(f"kept: {name} (not in the plan; --prune deletes it)")
    click.echo(f"awide-cluster: access of cluster {plan.cluster}: {len(lines)} step(s)"
               f"{' (dry run)' if dry_run else ''}")
