"""Typed errors of the store layer.

Callers decide on the type, never on a message:
- ``Unavailable``: no member could be reached (refused, reset, DNS, no quorum answer).
- ``Timeout``: the call's deadline passed before any member answered.
- ``Conflict``: a conditional write's comparison failed (someone else wrote first, or the
  writer no longer holds what it compared against: this is how fencing shows up).
- ``Denied``: authentication or permission refused.
- ``NoSpace``: etcd refuses writes because its backend quota is full (the NOSPACE alarm);
  reads and deletes still work. Never applied.
- ``BadResponse``: a member answered something that is not a valid etcd answer, or an
  answer whose revision went backwards (refused, see ``RevisionWentBack``).
- ``LeaseExpired``: a keepalive found the lease gone (or a put named a lease that is gone).
- ``InvalidRequest``: etcd refused the request itself (bad argument, compacted or future
  revision); sending it again will not help.
- ``WatchCompacted`` / ``WatchCanceled``: a watch ended; re-read, then watch again.
- ``TimelineChanged``: a watch ended because the store adopted a new etcd history (a restored
  or rebuilt cluster, timeline.py): its revisions mean nothing any more; re-read, then watch
  again from the present.
- ``TooLarge``: an answer (or one watch message) over the bytes the call may read; refused
  while streaming, naming the request and the bound. ``ValueTooLarge``: one key's value over
  the bound the caller gave (names the key and its mod_revision). ``TooManyKeys``: more keys
  under a prefix than the caller's bound.

A failed *write* may still have happened; ``maybe_applied`` (on every error, False unless
said otherwise) says so. Only ``Timeout`` and ``Unavailable`` ever set it.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base of every error the store raises."""

    maybe_applied: bool = False


class Unavailable(StoreError):
    """No etcd member answered (connection refused/reset, no leader, no quorum)."""

    def __init__(self, message: str, *, maybe_applied: bool = False) -> None:
        super().__init__(message)
        self.maybe_applied = maybe_applied


class Timeout(StoreError):
    """The call's deadline passed. ``late``: the most the caller's own event loop woke late
    during the call (seconds): a client too busy to read its answers in time (a start storm
    on a busy host), not a member that did not answer (about 0 when the loop kept time)."""

    def __init__(self, message: str, *, maybe_applied: bool = False, late: float = 0.0) -> None:
        super().__init__(message)
        self.maybe_applied = maybe_applied
        self.late = late


class Conflict(StoreError):
    """A conditional write (transaction compare) did not hold."""


class Denied(StoreError):
    """Authentication failed or permission denied."""


class NoSpace(StoreError):
    """etcd refused a write: its backend quota is full (NOSPACE alarm, "database space
    exceeded"). Every member answers the same until an operator frees space and disarms it."""


class BadResponse(StoreError):
    """The answer was not a valid etcd v3 JSON answer."""


class RevisionWentBack(BadResponse):
    """An answer carried a cluster revision lower than one already seen."""


class LeaseExpired(StoreError):
    """The lease no longer exists on the cluster."""


class LeaseExists(StoreError):
    """A grant with a chosen lease ID found that lease already there (granted before: by an
    earlier try of the same grant whose answer was lost, when the ID is this client's own)."""


class InvalidRequest(StoreError):
    """etcd refused the request as such (invalid argument, compacted/future revision)."""


class WatchCompacted(StoreError):
    """The watch's start revision was compacted away: re-read the keys, then watch again."""

    def __init__(self, message: str, *, compact_revision: int) -> None:
        super().__init__(message)
        self.compact_revision = compact_revision


class TimelineChanged(StoreError):
    """The store adopted a new etcd history while this watch ran: re-read, watch again."""


class WatchCanceled(StoreError):
    """etcd canceled the watch (reason in the message)."""


class TooLarge(StoreError):
    """An answer over the bytes this call may read: refused while streaming, never parsed.

    ``what`` names the request (e.g. ``range 'members/'``, ``watch 'registry'``), ``limit``
    is the bound in bytes. Another member would answer the same: not retried elsewhere.
    """

    def __init__(self, message: str, *, what: str = "", limit: int = 0,
                 head: bytes = b"") -> None:
        super().__init__(message)
        self.what = what
        self.limit = limit
        self.head = head        # the first bytes of the refused answer (never parsed as JSON)


class ValueTooLarge(TooLarge):
    """One key's value over the caller's bound; named by key, never decoded.

    ``size`` is the value's size in bytes when it was read, else a lower bound (the answer
    was cut off at the read bound); ``mod_revision`` is the value's (0 if unknown), so the
    caller does not read the same value again.
    """

    def __init__(self, message: str, *, key: str, limit: int, size: int,
                 mod_revision: int) -> None:
        super().__init__(message, what=f"get {key!r}", limit=limit)
        self.key = key
        self.size = size
        self.mod_revision = mod_revision


class WatchMessageTooLarge(TooLarge):
    """One watch message over the watch's bound was refused (not parsed). The watch goes on
    from ``skipped_to`` + 1: the events up to ``skipped_to`` are not delivered, so re-read
    the watched keys (bounded) before relying on the watch again."""

    def __init__(self, message: str, *, what: str, limit: int, skipped_to: int) -> None:
        super().__init__(message, what=what, limit=limit)
        self.skipped_to = skipped_to


class TooManyKeys(StoreError):
    """More keys under a prefix than the caller's bound (``count`` of them, bound ``limit``)."""

    def __init__(self, message: str, *, prefix: str, count: int, limit: int) -> None:
        super().__init__(message)
        self.prefix = prefix
        self.count = count
        self.limit = limit
# the ``reason`` label of refused writes (docs/metrics.md): a small fixed set
WRITE_REFUSAL_REASONS = ("nospace", "auth", "timeout", "unavailable", "other")


def refusal_reason(error: BaseException) -> str:
    """Why a write failed, as one of ``WRITE_REFUSAL_REASONS`` (decided on the type)."""
    if isinstance(error, NoSpace):
        return "nospace"
    if isinstance(error, Denied):
        return "auth"
    if isinstance(error, Timeout):
        return "timeout"
    if isinstance(error, Unavailable):
        return "unavailable"
    return "other"
