"""The real sysfs reader with its whole-tree reads counted (tests and benches that check how
often the controller tree is read). Not in ``fakes/sysfs.py``: the fake ``nvme`` program loads
that module by its file alone, without the project's packages."""

from __future__ import annotations

from pathlib import Path

from awide_cluster.nvme.sysfs import Controller, Sysfs


class CountedSysfs(Sysfs):
    """``awide_cluster.nvme.sysfs.Sysfs`` over a tree, its reads of the whole controller tree
    (``controllers()``) counted in ``scans``."""

    def __init__(self, root: Path | str) -> None:
        super().__init__(root)
        self.scans = 0

    def controllers(self) -> tuple[Controller, ...]:
        self.scans += 1
        return super().controllers()
