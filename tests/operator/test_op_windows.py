"""Operator windows against real daemons on a real etcd, through the real command: a pause
takes no failing card out and status says so loudly, ``resume`` ends it; a host in maintenance
keeps its cards while its daemon is stopped (its report gone), status shows who, why and until
when as a warning (exit 1), and once the window expires detection is as usual. Each change is
in the history."""

from __future__ import annotations

import json

from awide_cluster.config import daemon as daemon_config
from awide_cluster.contract import keys
from awide_cluster.contract import report as reportdoc
from awide_cluster.daemon.service import Daemon
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


async def report(lab: Lab, host: str) -> reportdoc.HostReport:
    kv = await lab.store.get(keys.member(host), timeout=2.0)
    assert kv is not None, f"no report of {host}"
    return reportdoc.decode(kv.value)


async def _new_run(lab: Lab, host: str, run: str) -> bool:
    kv = await lab.store.get(keys.member(host), timeout=2.0)
    return kv is not None and reportdoc.decode(kv.value).run != run


async def status(lab: Lab) -> tuple[int, dict]:
    """One read (``--sample 0``): what is checked here is no report's age."""
    code, out, err = await lab.cli("status", "--sample", "0", "-o", "json")
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
        code, out, _ = await lab.cli("status", "--sample", "0")
        assert "!!! PAUSED" in out and "etcd defrag" in out
        # resume: the failing card goes out as usual
        code, out, err = await lab.cli("resume", "--reason", "defrag done")
        assert code == 0 and "pause: ended" in out, (out, err)
        await lab.until(lambda r: lab.card(r, "h1", "card0").state == "out",
                        "the failing card out after resume", bound(20.0))
        DirCards(tmp_path / "h1").set_healthy("card0", True)
        await lab.until(lambda r: all(c.state == "in" for c in r.cards), "every card in again",
                        bound(20.0))

        # --- maintenance of h2: its daemon stops, its report is gone, its cards stay in.
        # The window lasts as long as what is checked inside it needs (a stop, six polls, a
        # status: about 2 s on a quiet machine), scaled: its expiry is waited for, not slept.
        window = int(bound(4.0))
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


async def test_maintenance_with_drain(shared_etcd, cluster_name, tmp_path):
    """``host maintenance HOST --drain``: the host's cards are drained before the window is
    set, stay drained while its daemon is away and after the window, and come back in with
    ``undrain``; the other host's cards are untouched."""
    async with Lab(shared_etcd, cluster_name, tmp_path) as lab:
        code, out, err = await lab.cli("host", "maintenance", "h2", "--for", "10m", "--reason",
                                       "disk swap", "--drain")
        assert code == 0 and "host h2: in force by" in out, (out, err)
        reg = await lab.registry()
        h2 = [c for c in reg.cards if c.host == "h2"]
        assert len(h2) == 2 and all(c.state == "drained" for c in h2), reg.cards
        assert all(c.state == "in" for c in reg.cards if c.host == "h1"), reg.cards
        # drained first: each drain said done before the window was in force
        window_at = out.index("host h2: in force")
        for c in h2:
            assert -1 < out.find(c.id) < window_at, out
        code, st = await status(lab)
        assert "host_maintenance" in {p["code"] for p in st["problems"]}, st["problems"]
        assert {c["id"]: c["drained_by"] for c in st["cards"] if c["host"] == "h2"} and all(
            "maintenance of h2: disk swap" in c["drained_by"]
            for c in st["cards"] if c["host"] == "h2"), st["cards"]

        # the daemon away and back during the window: the cards stay drained, none goes out
        before = await report(lab, "h2")
        await lab.daemons["h2"].stop()
        await polls_pass(lab, "h1")
        reg = await lab.registry()
        assert [c.state for c in reg.cards if c.host == "h2"] == ["drained"] * 2, reg.cards
        lab.daemons["h2"] = Daemon(daemon_config.parse(lab.configs["h2"], "<h2>"))
        await lab.daemons["h2"].start()
        await wait_until(lambda: _new_run(lab, "h2", before.run), bound(20.0),
                         "h2 reporting again")
        await polls_pass(lab, "h1", 2)

        # the window ends: still drained (until undrain, as documented), then back in
        code, out, err = await lab.cli("host", "maintenance", "h2", "--end", "--reason", "done")
        assert code == 0 and "host h2: ended" in out, (out, err)
        reg = await lab.registry()
        assert [c.state for c in reg.cards if c.host == "h2"] == ["drained"] * 2, reg.cards
        for c in h2:
            code, out, err = await lab.cli("undrain", c.id)
            assert code == 0, (out, err)
        await lab.until(lambda r: all(c.state == "in" for c in r.cards), "every card in again",
                        bound(20.0))
        said = await history(lab)
        assert "maintenance of h2: disk swap" in said and "host h2 set until" in said, said
        assert said.index("maintenance of h2: disk swap") < said.index("host h2 set until"), said
