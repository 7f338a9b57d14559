"""Typed errors of the store layer.

Callers decide on the type, never on a message:
- ``Unavailable``: no member could be reached (refused, reset, DNS, no quorum answer).
- ``Timeout``: the call's deadline passed before any member answered.
- ``Conflict``: a conditional write's comparison failed (someone else wrote first, or the
  writer no longer holds what it compared against: this is how fencing shows up).
- ``Denied``: authentication or permission refused.
- ``BadResponse``: a member answered something that is not a valid etcd answer, or an
  answer whose revision went backwards (refused, see ``RevisionWentBack``).
- ``LeaseExpired``: a keepalive found the lease gone.

A timed-out *write* may still have happened; ``Timeout.maybe_applied`` says so.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base of every error the store raises."""


class Unavailable(StoreError):
    """No etcd member answered (connection refused/reset, no leader, no quorum)."""


class Timeout(StoreError):
    """The call's deadline passed."""

    def __init__(self, message: str, *, maybe_applied: bool = False) -> None:
        super().__init__(message)
        self.maybe_applied = maybe_applied


class Conflict(StoreError):
    """A conditional write (transaction compare) did not hold."""


class Denied(StoreError):
    """Authentication failed or permission denied."""


class BadResponse(StoreError):
    """The answer was not a valid etcd v3 JSON answer."""


class RevisionWentBack(BadResponse):
    """An answer carried a cluster revision lower than one already seen."""


class LeaseExpired(StoreError):
    """The lease no longer exists on the cluster."""
