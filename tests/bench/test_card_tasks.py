"""``bench.card_tasks`` compares two shapes of the same work: both read every card's label each
round and fold it, so what it prints is what the shape costs, not less work done by one."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from awide_cluster.cards.directory import write_label
from awide_cluster.cards.worker import ProbeWorker
from bench import card_tasks
from bench.common import make_dir_cards


@pytest.mark.parametrize("shape", [card_tasks.tasks_shape, card_tasks.round_shape])
def test_each_shape_folds_every_card_each_round(tmp_path: Path,
                                                shape: card_tasks.Shape) -> None:
    cards = make_dir_cards(tmp_path, 3)
    fleets = [list(cards), cards[:1]]
    paths = asyncio.run(shape(ProbeWorker(name="test-card-tasks"), fleets, 2))
    assert [[p.card_id for p in row] for row in paths] == [[c.id for c in row]
                                                           for row in fleets]
    for row in paths:
        for p in row:
            assert p.device is not None and p.verified and p.health.up and not p.refused


@pytest.mark.parametrize("shape", [card_tasks.tasks_shape, card_tasks.round_shape])
def test_each_shape_reads_the_label_again_every_round(tmp_path: Path,
                                                      shape: card_tasks.Shape) -> None:
    """A label that stops matching is seen: the round read it, nothing cached the answer."""
    cards = make_dir_cards(tmp_path, 2)
    write_label(Path(str(cards[1].path)), "OTHERSN", "OTHER-MODEL", force=True)
    paths = asyncio.run(shape(ProbeWorker(name="test-card-tasks"), [cards], 1))
    assert not paths[0][0].refused
    assert paths[0][1].refused == "other storage in its place"


def test_the_run_writes_both_shapes_and_their_difference(tmp_path: Path) -> None:
    out = tmp_path / "card-tasks.json"
    assert card_tasks.main(["--reps", "2", "--gateways", "2", "--rounds", "2",
                            "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["reps"] == 2 and got["cards"] == card_tasks.CARDS
    for shape in ("tasks", "round"):
        assert got[shape]["all_8_us_median"] > 0
    assert "saved_us_per_card_round_median" in got
    assert got["calibration"]["python_cpu_s"] > 0
