"""Directory cards: labels, and 'same card' only when the same label comes back."""

from __future__ import annotations

import json
import shutil
import uuid

import pytest

from awide_cluster.cards.directory import (
    LABEL_FILE,
    CardLabel,
    LabelCorrupt,
    LabelExists,
    LabelMissing,
    discover_dir,
    read_label,
    same_card,
    write_label,
)
from awide_cluster.contract.target import NvmeTarget


def test_write_then_read(tmp_path):
    label = write_label(tmp_path, "DIR-0001", "awide dir card")
    assert read_label(tmp_path) == label
    assert uuid.UUID(label.uuid)
    assert label.identity == f"label:{label.uuid}"
    doc = json.loads((tmp_path / LABEL_FILE).read_text())
    assert doc == {"awide_card_label": 1, "serial": "DIR-0001", "model": "awide dir card",
                   "uuid": label.uuid}
    assert [p.name for p in tmp_path.iterdir()] == [LABEL_FILE]   # no temp file left


def test_given_uuid_is_kept(tmp_path):
    u = "6f1a5b8e-1b7a-4a5e-8f43-2b2b0b8d7b11"
    assert write_label(tmp_path, "S", "M", u).uuid == u


def test_refuses_to_overwrite_unless_forced(tmp_path):
    first = write_label(tmp_path, "DIR-0001", "m")
    with pytest.raises(LabelExists):
        write_label(tmp_path, "DIR-0002", "m")
    assert read_label(tmp_path) == first
    second = write_label(tmp_path, "DIR-0002", "m", force=True)
    assert read_label(tmp_path) == second != first


def test_write_needs_a_directory_and_valid_values(tmp_path):
    with pytest.raises(LabelMissing):
        write_label(tmp_path / "absent", "S", "M")
    with pytest.raises(LabelCorrupt):
        write_label(tmp_path, "S" * 21, "M")
    with pytest.raises(LabelCorrupt):
        write_label(tmp_path, "S", "M", uuid="not-a-uuid")
    assert not (tmp_path / LABEL_FILE).exists()


def test_missing(tmp_path):
    with pytest.raises(LabelMissing, match="no label"):
        read_label(tmp_path)
    with pytest.raises(LabelMissing, match="does not exist"):
        read_label(tmp_path / "absent")
    (tmp_path / "file").write_text("x")
    with pytest.raises(LabelMissing):
        read_label(tmp_path / "file")


@pytest.mark.parametrize("content,words", [
    ("not json", "not JSON"),
    ("[]", "not an awide card label"),
    ('{"awide_card_label": 2, "serial": "S", "model": "M", "uuid": "x"}', "version"),
    ('{"awide_card_label": 1, "serial": "S", "model": "M"}', "uuid"),
    ('{"awide_card_label": 1, "serial": "", "model": "M", '
     '"uuid": "6f1a5b8e-1b7a-4a5e-8f43-2b2b0b8d7b11"}', "serial"),
    ('{"awide_card_label": 1, "serial": "S", "model": "M", "uuid": "zz"}', "not a UUID"),
    ('{"awide_card_label": 1, "serial": "S", "model": "M", "extra": 1, '
     '"uuid": "6f1a5b8e-1b7a-4a5e-8f43-2b2b0b8d7b11"}', "unknown label fields"),
    ("\xff", "not JSON"),
    (" " * 70000, "larger than"),
])
def test_corrupt(tmp_path, content, words):
    (tmp_path / LABEL_FILE).write_text(content, errors="surrogateescape")
    with pytest.raises(LabelCorrupt, match=words):
        read_label(tmp_path)


def test_same_directory_back_is_the_same_card_other_storage_is_not(tmp_path):
    card = tmp_path / "card"
    card.mkdir()
    first = write_label(card, "DIR-0001", "m")
    saved = tmp_path / "saved"
    shutil.move(card, saved)                  # the storage leaves ...
    with pytest.raises(LabelMissing):
        read_label(card)
    card.mkdir()                              # ... other (empty) storage mounted there
    with pytest.raises(LabelMissing):
        read_label(card)
    write_label(card, "DIR-0001", "m")        # labelled anew, even with the same serial
    assert not same_card(first, read_label(card))
    shutil.rmtree(card)
    shutil.move(saved, card)                  # the original comes back
    assert same_card(first, read_label(card))
    assert not same_card(first, None)


def test_same_card_is_pure():
    a = CardLabel("S", "M", "6f1a5b8e-1b7a-4a5e-8f43-2b2b0b8d7b11")
    assert same_card(a, CardLabel("S", "M", a.uuid))
    assert not same_card(a, CardLabel("T", "M", a.uuid))


def test_discover_dir(tmp_path):
    label = write_label(tmp_path, "DIR-0001", "awide dir card")
    target = NvmeTarget("tcp", "10.0.0.1", 4420, "nqn.2024-01.io.awide:dev0")
    card = discover_dir("dev0", tmp_path, target)
    assert (card.name, card.kind, card.serial, card.model) == (
        "dev0", "dir", "DIR-0001", "awide dir card")
    assert card.identity == label.identity and card.device == str(tmp_path)
    assert card.controller_state is None and card.target == target
