"""``awide-cluster history`` and the live tail of ``status --watch`` against real daemons on a
real etcd: a card taken out shows with its reason, drain/undrain with who and why, a leader
change; --card and --since filter; a ring that cannot be read is a status problem and an error
of the history command, never a failure of the registry's writes."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from pathlib import Path

import pytest

from awide_cluster.contract import history_ring as histdoc
from awide_cluster.contract import keys
from tests.operator.op_fixtures import cluster_name, shared_etcd  # noqa: F401
from tests.operator.op_lab import CLI, Lab
from tests.timing import bound, wait_until

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def this_checkout(monkeypatch) -> None:
    """The command run as a subprocess imports this checkout's package."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))


@pytest.fixture
def leader_log(caplog):
    caplog.set_level(logging.INFO, logger="awide_cluster.leader")
    return caplog


async def _ring(lab: Lab) -> histdoc.History | None:
    kv = await lab.store.get(keys.HISTORY, timeout=2.0)
    try:
        return histdoc.decode(kv.value) if kv is not None else None
    except histdoc.HistoryError:
        return None


async def _history(lab: Lab, *args: str) -> list[dict]:
    code, out, err = await lab.cli("history", "--json", *args)
    assert code == 0, (out, err)
    return json.loads(out)["entries"]


class Watch:
    """``status --watch`` as a subprocess (stdout a pipe), its output collected as it comes."""

    def __init__(self, lab: Lab) -> None:
        self.lab, self.out = lab, ""

    async def __aenter__(self) -> Watch:
        self.proc = await asyncio.create_subprocess_exec(
            CLI, "status", "--watch", "0.3", env=self.lab.environment(),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        await self.until("HISTORY", "the first screen")
        return self

    async def until(self, text: str, what: str, within: float = 20.0) -> str:
        assert self.proc.stdout is not None
        async with asyncio.timeout(bound(within)):
            while text not in self.out:
                chunk = await self.proc.stdout.read(65536)
                assert chunk, f"status --watch ended before {what}: {self.out[-2000:]}"
                self.out += chunk.decode()
        return self.out

    async def __aexit__(self, *exc) -> None:
        self.proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(self.proc.communicate(), bound(10))


async def test_history_records_outs_operator_actions_and_leader_changes(
        shared_etcd, cluster_name, tmp_path):
    async with Lab(shared_etcd, cluster_name, tmp_path) as lab:
        reg = await lab.registry()
        first = reg.leader
        code, out, err = await lab.cli("history")
        assert code == 0, (out, err)
        assert f"leader   : {first} leads" in out, out
        assert out.count("joined") == 4 and len(out.splitlines()) >= 5, out
        # a card taken out: its entry says why, at the generation that took it out
        (tmp_path / "h1" / "card0.ok").unlink()
        reg = await lab.until(lambda r: lab.card(r, "h1", "card0").state == "out",
                              "h1/card0 out")
        c0 = lab.card(reg, "h1", "card0")
        got = await _history(lab, "--card", "h1/card0")
        assert {e["card"] for e in got} == {c0.id} and got[0]["kind"] == "joined"
        out_entry = next(e for e in got if e["kind"] == "out")
        assert out_entry["generation"] == c0.changed_generation
        assert out_entry["reason"].startswith("3 bad polls in a row, last: "), out_entry
        assert (out_entry["host"], out_entry["name"]) == ("h1", "card0")
        assert await _history(lab, "--card", c0.id) == got
        # drain and undrain with --reason: who and why, also live under status --watch
        async with Watch(lab) as watch:
            code, out, err = await lab.cli("drain", "h1/card1", "--reason", "replace the fan")
            assert code == 0, (out, err)
            screen = await watch.until("replace the fan]", "the drain in the live tail")
            tail = screen.rpartition("HISTORY")[2]
            assert "drained" in tail and "card " in tail and "(h1/card1)" in tail, tail
        code, out, err = await lab.cli("undrain", "h1/card1", "--reason", "fan replaced")
        assert code == 0, (out, err)
        code, out, err = await lab.cli("history", "--card", "h1/card1")
        assert code == 0, (out, err)
        drained = [line for line in out.splitlines() if " drained " in line]
        undrained = [line for line in out.splitlines() if " undrained " in line]
        assert len(drained) == 1 and "[by " in drained[0], out
        assert drained[0].endswith(": replace the fan]"), out
        assert len(undrained) == 1 and undrained[0].endswith(": fan replaced]"), out
        assert "h2/" not in out and "card0" not in out
        # --since: a time window on the leader's clock
        every = await _history(lab)
        since = await _history(lab, "--since", "1h")        # the cluster moves on meanwhile
        assert since[:len(every)] == every
        assert since == (await _history(lab))[:len(since)]
        assert await _history(lab, "--since", "2099-01-01T00:00:00+00:00") == []
        code, out, err = await lab.cli("history", "--since", "yesterday")
        assert code == 64 and "--since 'yesterday'" in err, (out, err)
        # a leader change is an entry of its own
        await lab.daemons[first].stop()
        ring = await wait_until(
            lambda: _leader_entry(lab, first), 20, "the new leader's history entry")
        assert ring.host != first and ring.reason.startswith(f"{ring.host} leads")
        assert ring.generation >= reg.generation
        got = await _history(lab)
        assert [e["seq"] for e in got] == sorted(e["seq"] for e in got)
        assert got[:len(every)] == every        # the new leader continued the same ring


async def _leader_entry(lab: Lab, old: str) -> histdoc.Entry | None:
    ring = await _ring(lab)
    if ring is None:
        return None
    return next((e for e in ring.entries if e.kind == "leader" and e.host != old), None)


async def test_a_ring_that_cannot_be_read_never_stops_the_registry(
        shared_etcd, cluster_name, tmp_path, leader_log):
    async with Lab(shared_etcd, cluster_name, tmp_path) as lab:
        reg = await lab.registry()
        before = await _ring(lab)
        assert before is not None
        await lab.store.put(keys.HISTORY, b'{"schema": 1, "ring": "r", "entries": '
                            b'[{"seq": "forged"}]}', timeout=2.0)
        code, out, err = await lab.cli("status", "--sample", "0")
        assert "history_corrupt" in out and "key history" in out, (out, err)
        assert code == 0, (out, err)            # a warning: the cards are served as before
        code, out, err = await lab.cli("history")
        assert code == 1 and "history (key history): field entries[0]" in err, (out, err)
        assert "cannot be shown" in err and out == ""
        # the leader keeps writing the registry, and its history with it
        code, out, err = await lab.cli("drain", "h2/card0", "--reason", "history is bad")
        assert code == 0, (out, err)
        after = await lab.registry()
        assert after.generation > reg.generation
        assert lab.card(after, "h2", "card0").state == "drained"
        got = await _history(lab, "--card", "h2/card0")
        assert got[-1]["kind"] == "drained" and got[-1]["why"] == "history is bad"
        # over its bound, found by a new leader: counted, one line logged, a fresh ring
        await lab.store.put(keys.HISTORY, b'{"x": "' + b"y" * (300 * 1024) + b'"}',
                            timeout=2.0)
        code, out, err = await lab.cli("history")
        assert code == 1 and "over 262144 bytes" in err, (out, err)
        code, out, err = await lab.cli("status", "--sample", "0")
        assert "value_too_large" in out and "history" in out, (out, err)
        await lab.daemons[after.leader].stop()
        entry = await wait_until(lambda: _leader_entry(lab, after.leader), 20,
                                 "a fresh ring from the new leader")
        fresh = await _ring(lab)
        assert fresh is not None and fresh.ring != before.ring
        assert fresh.entries[0].seq == 1 and fresh.entries[0] == entry
        lines = [r.getMessage() for r in leader_log.records
                 if "starting a fresh history" in r.getMessage()]
        assert len(lines) == 1 and "key history" in lines[0], lines
        code, out, err = await lab.cli("status", "--sample", "0")
        assert "history_corrupt" not in out and "value_too_large" not in out, (out, err)
        # and the new leader goes on: the stopped host's cards go out, in registry and ring
        gone = after.leader
        reg = await lab.until(lambda r: all(c.state != "in" for c in r.cards if c.host == gone),
                              f"{gone}'s cards out")
        got = await _history(lab)
        outs = {e["card"] for e in got if e["kind"] == "out"}
        assert {c.id for c in reg.cards if c.host == gone and c.state == "out"} <= outs, got
