"""A daemon turn's observation of its cards (``observe_all`` with the ``LocalObserver``): every
card's blocking probes go to the observer's one worker in one submission per turn, and every
card's store unit to one systemctl; each card gets its own result, and a card whose label read
hangs costs only that card, within its bound."""

from __future__ import annotations

import os
import time

from awide_cluster.cards.directory import LABEL_FILE, write_label
from awide_cluster.cards.spec import CardSpec
from awide_cluster.daemon.clock import SystemClock
from awide_cluster.daemon.reporter import LocalObserver, observe_all
from awide_cluster.nvme.runner import Runner
from awide_cluster.nvme.sysfs import Sysfs
from awide_harness.fakes import install_python_program
from tests.timing import bound, wait_until


def spec(path, name: str) -> CardSpec:
    return CardSpec.model_validate({"name": name, "kind": "dir", "path": str(path),
                                    "probe_timeout": 0.5})


async def test_a_turn_is_one_submission_each_card_its_result_a_hang_costs_its_card(tmp_path):
    observer = LocalObserver(Runner(), Sysfs(tmp_path / "sys"), SystemClock())
    specs = []
    for i in range(8):
        d = tmp_path / f"c{i}"
        d.mkdir()
        write_label(d, f"DIR-{i}", "m")
        specs.append(spec(d, f"c{i}"))
    known: dict[str, str] = {}
    for turn in (1, 2):
        obs = await observe_all(observer, tuple(specs), known)
        assert [o.card.serial for o in obs if o.card] == [f"DIR-{i}" for i in range(8)]
        assert all(o.healthy for o in obs), [o.reason for o in obs]
        assert observer.worker.submissions == turn          # one per turn, 16 jobs each
    assert observer.worker.threads_started == 1             # no thread started per poll
    assert len(known) == 8

    hung_dir = tmp_path / "hung"
    hung_dir.mkdir()
    fifo = hung_dir / LABEL_FILE
    os.mkfifo(fifo)                 # open() for reading blocks until a writer comes
    specs.insert(3, spec(hung_dir, "hung"))
    try:
        for _ in range(2):          # the turn it hangs, and the next one (still stuck)
            start = time.monotonic()
            obs = await observe_all(observer, tuple(specs), known)
            assert time.monotonic() - start < bound(0.5 + 0.5)
            assert obs[3].card is None and not obs[3].healthy
            others = obs[:3] + obs[4:]
            assert all(o.healthy for o in others), [o.reason for o in others]
    finally:
        def release() -> bool:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                return True
            except OSError:
                return False
        await wait_until(release, 2.0, "the hung label read released")


async def test_a_turn_asks_systemd_once_for_every_card_s_store_unit(tmp_path):
    """Eight cards whose stores are systemd units: one systemctl per turn, each card its own
    unit's state (a fake systemctl on the runner's PATH, as systemctl prints them)."""
    bin_dir = tmp_path / "bin"
    install_python_program(bin_dir, "systemctl", (
        "import os, sys\n"
        "open(os.environ['ASKED'], 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        "for u in sys.argv[3:]:\n"
        "    print('failed' if u == 'store-5.service' else 'active')\n"))
    asked = tmp_path / "asked"
    runner = Runner(env={**os.environ, "ASKED": str(asked),
                         "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    observer = LocalObserver(runner, Sysfs(tmp_path / "sys"), SystemClock())
    specs = []
    for i in range(8):
        d = tmp_path / f"c{i}"
        d.mkdir()
        write_label(d, f"DIR-{i}", "m")
        specs.append(CardSpec.model_validate({
            "name": f"c{i}", "kind": "dir", "path": str(d), "probe_timeout": 2.0,
            "store": {"systemd_unit": f"store-{i}.service"}}))
    for turn in (1, 2):
        obs = await observe_all(observer, tuple(specs), {})
        assert [o.healthy for o in obs] == [i != 5 for i in range(8)], [o.reason for o in obs]
        assert "store-5.service is failed" in obs[5].reason
        assert observer.units.calls == turn
    units = " ".join(f"store-{i}.service" for i in range(8))
    assert asked.read_text().splitlines() == [f"is-active -- {units}"] * 2
