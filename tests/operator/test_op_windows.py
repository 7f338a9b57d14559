"""Operator windows against real daemons on a real etcd, through the real command: a pause
takes no failing card out and status says so loudly, ``resume`` ends it; a host in maintenance
keeps its cards while its daemon is stopped (its report gone), status shows who, why and until
when as a warning (exit 1), and once the window expires detection is as usual. Each change is
in the history."""

from __future__ import annotations

import json

from awide_cluster.contract import keys
from awide_cluster.contract import report as reportdoc
from awide_harness.presets import DirCards
from tests.operator.op_fixtures import cluster_name, shared_etcd  # noqa: F401
from tests.operator.op_lab import Lab
from tests.timing import bound, wait_until

POLLS = 6           # a daemon's polls long past sick_polls (3): what would take a card out


async def seq(lab: Lab, host: str) -> int:
    kv = await lab.store.get(keys.member(host), timeout=2.0)
    return reportdoc.decode(kv.value).seq if kv is not None else -1


async def polls_pass(lab: Lab, host: str, n: int = POLLS) -> None:
    """Wait until ``host`` reported ``n`` more times (the leader polled as often)."""
    start = await seq(lab, host)
    await wait_until(lambda: _at_least(lab, host, start + n), bound(20.0),
                     f"{n} polls of {host}")


async def _at_least(lab: Lab, host: str, target: int) -> bool:
    return await seq(lab, host) >= target


async def status(lab: Lab) -> tuple[int, dict]:
    code, out, err = await lab.cli("status", "-o", "json")
    return code, json.loads(out)


async def history(lab: Lab) -> str:
    code, out, err = await lab.cli("history")
    assert code == 0, (out, err)
    return out


async def test_pause_and_maintenance(shared_etcd, cluster_name, tmp_path):
    async with Lab(shared_etcd, cluster_name, tmp_path) as lab:
        reg = await lab.registry()
        sick = lab.card(reg, "h1", "card0")
        assert sick is not None

        # --- pause: a failing card stays in, status says PAUSED with who and why
        code, out, err = await lab.cli("pause", "--for", "10m", "--reason", "etcd defrag")
        assert code == 0 and "pause: in force by" in out and "etcd defrag" in out, (out, err)
        DirCards(tmp_path / "h1").set_healthy("card0", False)
        await polls_pass(lab, "h1")
        assert lab.card(await lab.registry(), "h1", "card0").state == "in"
        code, st = await status(lab)
        assert code == 1 and st["verdict"] == "warn", st["problems"]
        paused = [p for p in st["problems"] if p["code"] == "cluster_paused"]
        assert paused and "etcd defrag" in paused[0]["message"] and paused[0]["holds"]
        assert [w["scope"] for w in st["windows"]] == ["pause"]
        code, out, _ = await lab.cli("status")
        assert "!!! PAUSED" in out and "etcd defrag" in out
        # resume: the failing card goes out as usual
        code, out, err = await lab.cli("resume", "--reason", "defrag done")
        assert code == 0 and "pause: ended" in out, (out, err)
        await lab.until(lambda r: lab.card(r, "h1", "card0").state == "out",
                        "the failing card out after resume", bound(20.0))
        DirCards(tmp_path / "h1").set_healthy("card0", True)
        await lab.until(lambda r: all(c.state == "in" for c in r.cards), "every card in again",
                        bound(20.0))

        # --- maintenance of h2: its daemon stops, its report is gone, its cards stay in
        window = int(bound(8.0))
        code, out, err = await lab.cli("host", "maintenance", "h2", "--for", f"{window}s",
                                       "--reason", "kernel update")
        assert code == 0 and "host h2: in force by" in out, (out, err)
        await lab.daemons["h2"].stop()
        assert await lab.store.get(keys.member("h2"), timeout=2.0) is None
        await polls_pass(lab, "h1")
        reg = await lab.registry()
        assert all(c.state == "in" for c in reg.cards if c.host == "h2"), reg.cards
        code, st = await status(lab)
        assert code == 1 and st["verdict"] == "warn", st["problems"]
        kinds = {p["code"]: p for p in st["problems"]}
        assert "kernel update" in kinds["host_maintenance"]["message"]
        assert kinds["host_down"]["severity"] == "warning" and kinds["host_down"]["muted"]
        h2 = next(h for h in st["hosts"] if h["host"] == "h2")
        assert "kernel update" in h2["maintenance"]
        # the window expires: h2's cards go out as for any stopped daemon
        await lab.until(lambda r: all(c.state == "out" for c in r.cards if c.host == "h2"),
                        "h2's cards out after the window", bound(window + 20.0))
        code, st = await status(lab)
        assert code == 2 and st["windows"] == [], st["problems"]
        said = await history(lab)
        for line in ("pause set until", "pause ended early", "host h2 set until",
                     "host h2 expired"):
            assert line in said, said
        await lab.daemons["h2"].start()
