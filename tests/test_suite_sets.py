"""The file sets tests/conftest.py sorts the suite by name files that exist: a renamed or
removed file would silently leave its set (and its tests would run in another step)."""

from __future__ import annotations

import pytest

from tests.conftest import BESIDE_FAST, LIGHT, REPO, STARTS_CLUSTERS


@pytest.mark.parametrize("name, files", [("STARTS_CLUSTERS", STARTS_CLUSTERS),
                                         ("BESIDE_FAST", BESIDE_FAST), ("LIGHT", LIGHT)])
def test_every_file_named_exists(name: str, files: frozenset[str]) -> None:
    missing = sorted(f for f in files if not (REPO / "tests" / f).is_file())
    assert not missing, f"{name} names files that do not exist: {missing}"


def test_the_sets_do_not_overlap() -> None:
    assert not (BESIDE_FAST & LIGHT), BESIDE_FAST & LIGHT
