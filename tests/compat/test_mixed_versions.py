"""Version skew N / N-1 on one embedded cluster (docs/versions.md).

The previous release is the commit named in ``previous-release`` (beside this file), checked out
with ``git worktree add --detach`` into a temporary directory. Its daemons and gateways run with
this venv's interpreter and ``PYTHONPATH`` set to that checkout (``EmbeddedCluster.code_roots``):
the dependencies are pinned the same in both releases (pyproject.toml), so that stands in for a
venv of its own. The previous release predates the version fields: it writes none and reads any
minor of schema 1, so what is shown here is what the policy promises between it and this one.

One cluster of 3 storage hosts (one card each) and 2 gateways starts on the previous release;
then a rolling upgrade, one process at a time, the leader last (on the way: an old leader with
new daemons and gateways, a card fault judged by it), then a rolling rollback the same way (on
the way: a new leader with old daemons and gateways, a card fault judged by it). Throughout: no
healthy card out and no slot move on any gateway; the registry schema is the highest every live
reader reads fully (1.0 while a previous-release process lives, 1.1 once none does).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from awide_cluster.contract import keys, records
from awide_cluster.contract import report as reportdoc
from awide_cluster.contract.versions import Schema
from awide_harness.cluster import EmbeddedCluster
from awide_harness.spec import ClusterSpec, Timing, bounds
from awide_harness.views import GatewayView, cards_in, cards_out
from awide_harness.waits import wait_until_sync
from tests.embedded.support import etcd_or_skip

REPO = Path(__file__).resolve().parents[2]
RELEASE_FILE = Path(__file__).with_name("previous-release")
TIMING = Timing(poll_interval=0.25, lease_ttl=2, sick_polls=3, healthy_polls=1,
                call_timeout=0.2, restart_grace=20)
BOUNDS = bounds(TIMING)
BOUND = 30.0                    # generous deadline of every wait

pytestmark = pytest.mark.timeout(240)


@dataclass(frozen=True)
class Release:
    commit: str
    version: str


def previous_release() -> Release:
    fields = dict(line.split(None, 1) for line in RELEASE_FILE.read_text().splitlines()
                  if line.strip() and not line.startswith("#"))
    return Release(commit=fields["commit"].strip(), version=fields["version"].strip())


def git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.fixture(scope="module")
def old_tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The previous release's source tree (a detached git worktree), removed afterwards."""
    rel = previous_release()
    if shutil.which("git") is None or git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout: the previous release cannot be checked out")
    if git("cat-file", "-e", f"{rel.commit}^{{commit}}").returncode != 0:
        if git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
            pytest.skip(f"the previous release {rel.commit[:12]} ({rel.version}) is not in this "
                        "shallow clone's history: `git fetch --unshallow` (.ci/run does)")
        pytest.fail(f"{RELEASE_FILE.name} names {rel.commit}, not a commit of this repository")
    where = tmp_path_factory.mktemp("previous") / f"awide-cluster-{rel.version}"
    added = git("worktree", "add", "--detach", str(where), rel.commit)
    assert added.returncode == 0, added.stderr
    try:
        yield where
    finally:
        git("worktree", "remove", "--force", str(where))
        git("worktree", "prune")


def wait(pred, what: str, bound: float = BOUND):
    return wait_until_sync(pred, bound, what, poll=0.05)


def report_of(c: EmbeddedCluster, host: str) -> reportdoc.HostReport | None:
    kv = c.read_key(keys.member(host))
    return reportdoc.decode(kv.value) if kv is not None else None


def record_of(c: EmbeddedCluster, gid: str) -> records.GatewayRecord | None:
    kv = c.read_key(keys.GATEWAYS + gid)
    return records.decode_gateway(kv.value, gid) if kv is not None else None


def schema(c: EmbeddedCluster) -> Schema:
    reg = c.registry()
    assert reg is not None
    return reg.schema_version


class Fleet:
    """Moves each process of the cluster between the two releases, one at a time, and keeps
    the windows in which a card was taken out on purpose."""

    def __init__(self, c: EmbeddedCluster, old: Path, ids: list[str]) -> None:
        self.c, self.old, self.ids = c, old, ids
        self.faults: list[tuple[str, float, float]] = []     # card id, from, to
        # a gateway's own restart (gateway id, stop, first view serving every card): the
        # engine process restarts, its start-up lines before it serves are not a card out
        self.restarts: list[tuple[str, float, float]] = []

    def release_of(self, minor: int) -> str:
        return "new" if minor >= 1 else "old"

    def move(self, name: str, to: str) -> None:
        """Restart ``name`` (a host's daemon, or a gateway) on release ``to`` ("old"/"new")
        and wait until it writes its report or record as that release."""
        c = self.c
        if to == "old":
            c.code_roots[name] = self.old
        else:
            c.code_roots.pop(name, None)
        if name in c.gateway_ids:
            t = c.restart_gateway(name)
            wait(lambda: (r := record_of(c, name)) is not None
                 and self.release_of(r.schema_minor) == to, f"gateway {name} runs the {to} one")
            v = wait(lambda: (v := c.gateway_views()[name]) is not None and v.seen_at > t
                     and all(v.card_in(i) for i in self.ids) and v,
                     f"gateway {name} serves every card")
            self.restarts.append((name, t, v.seen_at))
            return
        before = report_of(c, name)
        assert before is not None
        c.stop_daemon(name)
        c.start_daemon(name)
        wait(lambda: (r := report_of(c, name)) is not None and r.run != before.run
             and r.restarting is None and self.release_of(r.schema_minor) == to,
             f"{name} reports as the {to} release")

    def fault(self, key: str) -> None:
        """A card's store stops: it goes out on every gateway within the detection bound
        (judged by whatever leader runs), and comes back once it is started again."""
        c = self.c
        cid = c.card_id(key)
        t = c.card_store_kill(key)
        seen = c.wait_until(cards_out([cid]), BOUNDS.detection + 5.0, since=t)
        assert all(x is not None for x in seen.values()), f"{key} not out everywhere: {seen}"
        c.card_store_start(key)
        back = c.wait_until(cards_in([cid]), BOUND, since=time.monotonic())
        assert all(x is not None for x in back.values()), f"{key} not back: {back}"
        self.faults.append((cid, t, max(x for x in back.values() if x is not None)))

    def healthy_out(self, since: float) -> dict[str, int]:
        """Per gateway: views since ``since`` in which a card not taken out on purpose was
        not in service (a gateway's first lines before it applied a registry aside)."""
        def excused(cid: str, v: GatewayView) -> bool:
            return (any(cid == f and a <= v.seen_at <= b for f, a, b in self.faults)
                    or any(v.gateway == g and a <= v.seen_at < b for g, a, b in self.restarts))

        return {g: sum(1 for v in self.c.history(g) if v.seen_at >= since and v.generation
                       and any(not v.card_in(i) and not excused(i, v) for i in self.ids))
                for g in self.c.gateway_ids}

    def serving_after(self, since: float) -> dict[str, float]:
        """Per gateway restarted since ``since``: seconds from its stop to serving every card
        (the longest of its restarts)."""
        out: dict[str, float] = {}
        for g, a, b in self.restarts:
            if a >= since:
                out[g] = round(max(out.get(g, 0.0), b - a), 1)
        return out

    def slot_moves(self, table: tuple[str | None, ...], since: float) -> dict[str, int]:
        """Per gateway: views since ``since`` whose slot table is not ``table``."""
        return {g: sum(1 for v in self.c.history(g) if v.seen_at >= since and v.generation
                       and v.slots != table) for g in self.c.gateway_ids}


def test_rolling_upgrade_and_rollback_between_the_previous_release_and_this_one(
        old_tree: Path, tmp_path: Path) -> None:
    spec = ClusterSpec(cluster="skew1", storage_hosts=3, cards_per_host=1, witness_hosts=0,
                       gateways=2, timing=TIMING, etcd_binary=etcd_or_skip(),
                       first_leader="s1")
    c = EmbeddedCluster(tmp_path / "cluster", spec)
    for name in (*spec.hosts, *spec.gateway_ids):
        c.code_roots[name] = old_tree
    with c:
        ids = [c.card_id(k) for k in c.cards]
        fleet = Fleet(c, old_tree, ids)
        assert all(t is not None for t in c.wait_until(cards_in(ids), BOUND).values())
        assert {r.schema_minor for h in spec.hosts if (r := report_of(c, h))} == {0}  # old
        assert schema(c) == Schema(1, 0)
        reg = c.registry()
        assert reg is not None
        table = reg.slots.slots
        leader = c.leader_host()
        assert leader == "s1"

        # rolling upgrade: the followers, the gateways, the leader last
        t0 = time.monotonic()
        for name in ("s2", "s3", *spec.gateway_ids):
            fleet.move(name, "new")
        # an old leader with new daemons and gateways: it reads their reports, writes 1.0
        assert c.leader_host() == "s1"
        assert schema(c) == Schema(1, 0)
        fleet.fault(c.cards_of("s2")[0])
        fleet.move("s1", "new")
        wait(lambda: schema(c) == Schema(1, 1), "registry schema 1.1 once every reader reads it")
        t1 = time.monotonic()
        up_out, up_moves = fleet.healthy_out(t0), fleet.slot_moves(table, t0)
        print(f"\nrolling upgrade {previous_release().version} -> this checkout, 3 storage "
              f"hosts and 2 gateways, one at a time, leader last: {t1 - t0:.1f} s "
              f"(one card fault judged by the old leader on the way); views with a healthy "
              f"card out per gateway {up_out}, views with a slot moved per gateway {up_moves}"
              f"; each gateway's own restart, stop to serving every card again (s): "
              f"{fleet.serving_after(t0)}")

        # rolling rollback, the leader (now a new-release host) last
        leader = c.leader_host()
        assert leader is not None
        followers = [h for h in spec.hosts if h != leader]
        for name in (*followers, *spec.gateway_ids):
            fleet.move(name, "old")
            # a previous-release process lives: the new leader writes 1.0 for it
            wait(lambda: schema(c) == Schema(1, 0), "registry schema back to 1.0")
        # a new leader with old daemons and gateways: it reads their reports
        assert c.leader_host() == leader
        fleet.fault(c.cards_of(followers[-1])[0])
        fleet.move(leader, "old")
        assert all(t is not None for t in c.wait_until(cards_in(ids), BOUND).values())
        t2 = time.monotonic()
        down_out, down_moves = fleet.healthy_out(t1), fleet.slot_moves(table, t1)
        print(f"rolling rollback to {previous_release().version}, leader last: {t2 - t1:.1f} s;"
              f" views with a healthy card out per gateway {down_out}, views with a slot moved"
              f" per gateway {down_moves}")
        assert up_out == down_out == {g: 0 for g in spec.gateway_ids}
        assert up_moves == down_moves == {g: 0 for g in spec.gateway_ids}
        assert schema(c) == Schema(1, 0)
