"""Typed errors of the NVMe layer (nvme-cli and sysfs).

Validation errors (``InvalidTarget`` and friends) live in ``target.py`` and subclass
``ValueError``; the runner's errors (``CommandTimeout``, ``ProgramNotFound`` ...) live in
``runner.py``. This module holds what nvme-cli's answers can go wrong with.
"""

from __future__ import annotations


class NvmeError(Exception):
    """Base of the errors raised by the nvme-cli wrapper and the parsers."""


class NvmeParseError(NvmeError):
    """An nvme-cli answer (or a sysfs attribute) was not what nvme-cli 2.3 prints."""

    def __init__(self, command: str, field: str, reason: str) -> None:
        self.command = command
        self.field = field
        self.reason = reason
        super().__init__(f"nvme {command}: field {field!r}: {reason}")


class NvmeCommandFailed(NvmeError):
    """nvme-cli exited non-zero (or said in its text that it did nothing)."""

    def __init__(self, command: str, rc: int, detail: str) -> None:
        self.command = command
        self.rc = rc
        self.detail = detail.strip()[:500]
        super().__init__(f"nvme {command} failed (exit {rc}): {self.detail or 'no message'}")


class AlreadyConnected(NvmeCommandFailed):
    """``nvme connect`` found the controller already connected (exit 1, 'already connected')."""


class ConnectFailed(NvmeCommandFailed):
    """``nvme connect`` failed for any other reason (target unreachable, refused, ...)."""


class DisconnectFailed(NvmeCommandFailed):
    """``nvme disconnect`` disconnected nothing (even when it exited 0)."""
