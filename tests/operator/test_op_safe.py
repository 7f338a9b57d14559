"""Safe operator commands against real daemons on a real etcd: ``forget`` says what will
happen, asks on a terminal (a real pty), needs ``--yes`` elsewhere, refuses a card its host
still reports unless ``--force``; every intent carries who/when/why and the leader logs it."""

from __future__ import annotations

import logging

import pytest

from awide_cluster.contract.registry import CardEntry, Registry, with_slots
from awide_cluster.daemon.intents import plan
from tests.operator import op_state as state
from tests.operator.op_fixtures import cluster_name, shared_etcd  # noqa: F401
from tests.operator.op_lab import Lab
from tests.timing import wait_until


@pytest.fixture
def leader_log(caplog):
    caplog.set_level(logging.INFO, logger="awide_cluster.leader")
    caplog.set_level(logging.INFO, logger="awide_cluster.daemon")
    return caplog


async def test_forget_refuses_a_card_its_host_still_reports(shared_etcd, cluster_name,
                                                            tmp_path, leader_log):
    async with Lab(shared_etcd, cluster_name, tmp_path) as lab:
        reg = await lab.registry()
        card = lab.card(reg, "h1", "card0")
        # no --reason where no terminal can ask: exit 64 before etcd is even read
        code, out, err = await lab.cli("forget", "h1/card0", "--yes")
        assert code == 64 and "forget needs --reason" in err, (out, err)
        # a host still reports it: refused, nothing written
        code, out, err = await lab.cli("forget", "h1/card0", "--yes", "--reason", "test")
        assert code == 1, (out, err)
        assert "will be forgotten" in out and "h1/card0" in out
        assert "refused: host h1 still reports it" in err and "--force" in err
        assert await lab.intent(card.id) is None
        assert lab.card(await lab.registry(), "h1", "card0").admitted == card.admitted
        # --force: it is forgotten, and the leader admits it again at once (as it said)
        code, out, err = await lab.cli("forget", "h1/card0", "--yes", "--force",
                                       "--reason", "try the force")
        assert code == 0, (out, err)
        assert "--force: host h1 still reports it" in out and "forgotten" in out
        back = await lab.until(lambda r: (c := lab.card(r, "h1", "card0")) is not None
                               and c.admitted > card.admitted, "the card admitted again")
        assert lab.card(back, "h1", "card0").id == card.id
        assert any("forgotten by intent from" in r.getMessage()
                   and "(reason: try the force)" in r.getMessage()
                   and "its host still reports it" in r.getMessage()
                   for r in leader_log.records), [r.getMessage() for r in leader_log.records]


async def test_forget_a_dead_card_asks_and_records_why(shared_etcd, cluster_name, tmp_path,
                                                        leader_log):
    async with Lab(shared_etcd, cluster_name, tmp_path) as lab:
        await lab.daemons["h2"].stop()         # h2 is gone: its cards go out, unreported
        reg = await lab.until(lambda r: all(c.state == "out" for c in r.cards
                                            if c.host == "h2"), "h2's cards out")
        gone0, gone1 = lab.card(reg, "h2", "card0"), lab.card(reg, "h2", "card1")
        slot = reg.slots.slot_of(gone0.id)
        # a script without --yes: it says what would happen, then exit 64, nothing written
        code, out, err = await lab.cli("forget", "h2/card0", "--reason", "RMA 4411")
        assert code == 64, (out, err)
        assert f"will be forgotten: it leaves the registry and slot {slot} is freed" in out
        assert "needs --yes" in err and "nothing was written" in err
        assert await lab.intent(gone0.id) is None
        # on a terminal: asked for the reason, then to confirm; "n" writes nothing
        code, out, err = await lab.cli("forget", "h2/card0", tty_answers=[
            ("reason", "RMA 4411"), ("[y/N]", "n")])
        assert code == 1 and "not confirmed" in err, (out, err)
        assert await lab.intent(gone0.id) is None
        assert lab.card(await lab.registry(), "h2", "card0") is not None
        # "y": forgotten, and the leader logs who and why
        code, out, err = await lab.cli("forget", gone0.serial, tty_answers=[
            ("reason", "RMA 4411"), ("[y/N]", "y")])
        assert code == 0, (out, err)
        assert f"card {gone0.id}" in out and "forgotten" in out
        reg = await lab.registry()
        assert lab.card(reg, "h2", "card0") is None and reg.slots.slot_of(gone0.id) is None
        # a script with --yes
        code, out, err = await lab.cli("forget", "h2/card1", "--yes", "--reason", "RMA 4412")
        assert code == 0, (out, err)
        assert lab.card(await lab.registry(), "h2", "card1") is None
        logged = [r.getMessage() for r in leader_log.records]
        for cid, why in ((gone0.id, "RMA 4411"), (gone1.id, "RMA 4412")):
            assert any(f"card {cid}" in m and "forgotten by intent from" in m
                       and f"(reason: {why})" in m for m in logged), logged


async def test_drain_is_a_warning_until_undrain(shared_etcd, cluster_name, tmp_path,
                                                leader_log):
    async with Lab(shared_etcd, cluster_name, tmp_path) as lab:
        code, out, err = await lab.cli("status", "--sample", "0.3")
        assert code == 0 and f"cluster {cluster_name}: HEALTHY" in out, (out, err)
        code, out, err = await lab.cli("drain", "h1/card1", "--reason", "replace the fan")
        assert code == 0, (out, err)
        assert "will be drained" in out and "in -> drained" in out
        code, out, err = await lab.cli("status", "--sample", "0.3")
        assert code == 1, (out, err)
        assert f"cluster {cluster_name}: WARN (1 set by an operator: card_drained)" in out
        code, out, err = await lab.cli("cards", "--sample", "0")
        assert code == 1 and "DRAINED" in out, (out, err)
        code, out, err = await lab.cli("undrain", "h1/card1", "--reason", "fan replaced")
        assert code == 0 and "drained -> in" in out, (out, err)
        code, out, err = await lab.cli("status", "--sample", "0.3")
        assert code == 0 and f"cluster {cluster_name}: HEALTHY" in out, (out, err)
        # the leader logs each in the history's words, with who and why; the card's own host
        # (when it does not lead) logs the same line from the history
        code, said, err = await lab.cli("history", "--card", "h1/card1")
        assert code == 0, (said, err)
        want = [" ".join(line.split()[:2] + line.split()[3:]) for line in said.splitlines()
                if " drained " in line or " undrained " in line]
        assert len(want) == 2 and want[0].endswith(": replace the fan]"), said

        def logged(logger: str) -> list[str]:
            return [" ".join(r.getMessage().split()) for r in leader_log.records
                    if r.name == logger and r.levelno == logging.INFO]

        assert all(line in logged("awide_cluster.leader") for line in want), \
            (want, logged("awide_cluster.leader"))
        if (await lab.registry()).leader != "h1":
            await wait_until(lambda: all(line in logged("awide_cluster.daemon")
                                         for line in want), 10, "h1 logging its card's changes")


def _entry(serial: str, admitted: int) -> CardEntry:
    return state.card("h1", f"card{serial[-1]}", serial, admitted=admitted)


def test_plan_names_the_cards_a_forget_moves():
    """Forgetting a placed card frees its slot; a card waiting without one takes it: the
    plan says so before anything is written."""
    cards = [_entry(f"SN-{i}", admitted=i + 1) for i in range(9)]       # a 9th card waits
    reg = with_slots(Registry(cluster="c1", generation=9, leader="h1", cards=tuple(cards)))
    waiting = next(c for c in cards if reg.slots.slot_of(c.id) is None)
    first = next(c for c in cards if reg.slots.slot_of(c.id) == 3)
    lines = plan("forget", first, reg)
    assert lines[0].endswith("will be forgotten: it leaves the registry and slot 3 is freed")
    assert lines[1:] == [f"  then card {waiting.id} ({waiting.serial} on h1): no slot -> slot 3"]
    assert "keeps slot 3" in plan("drain", first, reg)[0]
    assert plan("undrain", first, reg)[0].endswith("not drained, nothing changes")
