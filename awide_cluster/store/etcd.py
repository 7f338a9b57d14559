"""``EtcdStore``: etcd's v3 JSON API over aiohttp, bounded, hedged, typed. See docs/store.md.

Every call finishes within its deadline (``timeout=`` or ``StoreConfig.call_timeout``), hedges
and endpoint changes included. Reads are hedged across members; writes go to one member and
are never repeated once they may have reached it. Every answer's revision is checked against
the highest revision seen before the call was sent (``last_revision``). Every answer is read
under a byte bound (``StoreConfig.max_answer_bytes``; ``TooLarge`` beyond); values under a
caller's bound: ``range(key, max_value_bytes=N)`` and ``read_prefix`` (see bounded.py).

Every answer is judged against the etcd history the store follows (cluster id and revision
floor, timeline.py): a refused answer makes the store take a census of every member
(``Session.reconsider_timeline``), which adopts a restored or rebuilt etcd only when a quorum of the
members, and every member that answers, are in the new history; ``timeline_epoch`` then grows,
and a read refused for it is asked again once within its deadline.

The connection itself (endpoints, TLS, credentials and token, the history followed, the two
kinds of request) is the store's ``session`` (session.py); this module is the key-value,
lease and cluster calls on top of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from awide_cluster.store import bounded, bounded_many, codec
from awide_cluster.store.codec import Codec
from awide_cluster.store.config import StoreConfig
from awide_cluster.store.errors import (
    BadResponse,
    Conflict,
    LeaseExpired,
    StoreError,
    Timeout,
    ValueTooLarge,
)
from awide_cluster.store.hedge import EndpointRing
from awide_cluster.store.port import Op
from awide_cluster.store.session import Session, scan_quota
from awide_cluster.store.timeline import Timeline
from awide_cluster.store.transport import Transport
from awide_cluster.store.types import (
    Alarm,
    Compare,
    EndpointStatus,
    FolderRead,
    KeyValue,
    Lease,
    ManyGot,
    ManyRead,
    Member,
    PrefixRead,
    Put,
    RangeResult,
    TxnResult,
)
from awide_cluster.store.watch import Watch

T = TypeVar("T")


class EtcdStore:
    def __init__(self, config: StoreConfig) -> None:
        self.session = Session(config)

    # ------------------------------------------------------------------ the session's state

    @property
    def config(self) -> StoreConfig:
        return self.session.config

    @property
    def codec(self) -> Codec:
        return self.session.codec

    @property
    def ring(self) -> EndpointRing:
        return self.session.ring

    @property
    def transport(self) -> Transport:
        return self.session.transport

    @property
    def timeline(self) -> Timeline:
        return self.session.timeline

    @property
    def timeline_note(self) -> str:
        """Why the last new history was adopted ("" when none was)."""
        return self.session.timeline_note

    @property
    def refusals(self) -> bounded.RefusalMemory:
        """Values refused for their size, by key: not read again while unchanged."""
        return self.session.refusals

    @property
    def last_revision(self) -> int:
        """Highest cluster revision seen in the history followed (0 before the first)."""
        return self.session.last_revision

    @property
    def timeline_epoch(self) -> int:
        """How many new etcd histories (restored or rebuilt clusters) this store adopted.
        Whoever remembers a revision compares it with the epoch it remembered it in."""
        return self.session.timeline_epoch

    @property
    def preferred_endpoint(self) -> str:
        return self.session.preferred_endpoint

    def note_revision(self, revision: int, cluster_id: int = 0) -> None:
        """Raise the floor to ``revision`` if it is of the history followed (never refuses)."""
        self.session.note_revision(revision, cluster_id)

    def deadline(self, timeout: float | None) -> float:
        return self.session.deadline(timeout)

    def reload_credentials(self) -> str:
        """Read the credential files again (SIGHUP); see ``Session.reload_credentials``."""
        return self.session.reload_credentials()

    # ------------------------------------------------------------------ requests

    async def read(self, path: str, body: dict[str, Any], timeout: float | None,
                   what: str, *, max_bytes: int | None = None) -> tuple[str, dict[str, Any]]:
        """A hedged idempotent call (``Session.read``); every read of the store, bounded ones
        included, goes through here."""
        return await self.session.read(path, body, timeout, what, max_bytes=max_bytes)

    async def write(self, path: str, body: dict[str, Any], timeout: float | None,
                    what: str) -> tuple[str, dict[str, Any]]:
        """A single-shot write (``Session.write``); every write of the store goes through
        here."""
        return await self.session.write(path, body, timeout, what)

    # ------------------------------------------------------------------ keys

    async def range(self, key: str, *, prefix: bool = False, min_mod_revision: int | None = None,
                    serializable: bool = False, keys_only: bool = False, limit: int = 0,
                    revision: int | None = None, max_value_bytes: int | None = None,
                    timeout: float | None = None) -> RangeResult:
        """Keys ``key`` (or under it, ``prefix``); ``count`` is every key of the range,
        ``more`` says ``limit`` cut it. ``revision``: read at that past revision.

        ``max_value_bytes`` (one key only, not with ``prefix``/``keys_only``/``revision``):
        a value over it raises ``ValueTooLarge`` naming the key, read at most once per
        mod_revision (see bounded.py). For many keys use ``read_prefix``."""
        if max_value_bytes is not None:
            if prefix or keys_only or limit or revision:
                raise ValueError("range: max_value_bytes is for one key; use read_prefix")
            return await bounded.get_range(self, key, max_value_bytes=max_value_bytes,
                                           min_mod_revision=min_mod_revision,
                                           serializable=serializable, timeout=timeout)
        body = self.codec.range_request(key, prefix=prefix, min_mod_revision=min_mod_revision,
                                        serializable=serializable, keys_only=keys_only,
                                        limit=limit, revision=revision)
        ep, answer = await self.read("/v3/kv/range", body, timeout, f"range {key!r}")
        return self.codec.range_result(answer, ep)

    async def read_prefix(self, prefix: str, *, max_keys: int, max_value_bytes: int,
                          timeout: float | None = None, serializable: bool = False,
                          page_keys: int | None = None) -> PrefixRead:
        """Every key under ``prefix``, in bounded pages, within one deadline: the values of
        at most ``max_value_bytes`` in ``kvs``, the others refused by key in ``refused``
        (never decoded, not read again while unchanged); more than ``max_keys`` keys sets
        ``more`` and ``count`` (``PrefixRead.complete()`` raises ``TooManyKeys`` then)."""
        return await bounded.read_prefix(self, prefix, max_keys=max_keys,
                                         max_value_bytes=max_value_bytes, timeout=timeout,
                                         serializable=serializable, page_keys=page_keys)

    async def get(self, key: str, *, min_mod_revision: int | None = None,
                  serializable: bool = False, max_value_bytes: int | None = None,
                  timeout: float | None = None) -> KeyValue | None:
        """The key's KeyValue or None (``range`` of one key, its keywords)."""
        result = await self.range(key, min_mod_revision=min_mod_revision,
                                  serializable=serializable, max_value_bytes=max_value_bytes,
                                  timeout=timeout)
        return result.kvs[0] if result.kvs else None

    async def read_many(self, reads: Iterable[ManyRead], *,
                        timeout: float | None = None) -> list[ManyGot]:
        """Several keys and prefixes, each as ``get`` (with ``max_value_bytes``: a value over
        it is returned as its ``ValueTooLarge``) or ``read_prefix`` reads it, in one request
        when every one is plain (bounded.py, ``read_many``); the others by ``get`` and
        ``read_prefix``, within the same deadline. StoreError when any read fails."""
        return await bounded_many.read_many(self, reads, self.read_alone, timeout=timeout)

    async def read_alone(self, r: ManyRead, timeout: float) -> ManyGot:
        """One read of a ``read_many`` by ``get`` (a ranged key: ``range``) or
        ``read_prefix``."""
        if isinstance(r, FolderRead):
            return await self.read_prefix(r.prefix, max_keys=r.max_keys,
                                          max_value_bytes=r.max_value_bytes, timeout=timeout)
        try:
            if r.ranged:
                return await self.range(r.key, max_value_bytes=r.max_value_bytes,
                                        timeout=timeout)
            return await self.get(r.key, max_value_bytes=r.max_value_bytes, timeout=timeout)
        except ValueTooLarge as e:
            return e

    async def txn(self, compares: Iterable[Compare], success: Iterable[Op],
                  failure: Iterable[Op] = (), *, timeout: float | None = None) -> TxnResult:
        compares, success, failure = tuple(compares), tuple(success), tuple(failure)
        body = self.codec.txn_request(compares, success, failure)
        ep, answer = await self.write("/v3/kv/txn", body, timeout, "txn")
        branch = success if answer.get("succeeded", False) is True else failure
        return self.codec.txn_result(answer, branch, ep)

    async def create(self, key: str, value: bytes | str, *, lease: int = 0,
                     timeout: float | None = None) -> int:
        """Put ``key`` only if absent; its revision, or Conflict when it already exists."""
        result = await self.txn([Compare(key, "create", "equal", 0)],
                                [Put(key, codec.to_bytes(value), lease)], timeout=timeout)
        if not result.succeeded:
            raise Conflict(f"create {key!r}: the key already exists")
        return result.revision

    async def put(self, key: str, value: bytes | str, *, lease: int = 0,
                  timeout: float | None = None) -> int:
        """Unconditional put; the revision of the write."""
        _, answer = await self.write("/v3/kv/put", self.codec.put_request(key, value, lease),
                                     timeout, f"put {key!r}")
        return codec.header_revision(answer)

    async def delete(self, key: str, *, prefix: bool = False,
                     timeout: float | None = None) -> int:
        """Delete ``key`` (or every key under it); how many keys were deleted."""
        _, answer = await self.write("/v3/kv/deleterange", self.codec.key_range(key, prefix),
                                     timeout, f"delete {key!r}")
        return codec.as_int(answer, "deleted")

    # ------------------------------------------------------------------ leases

    async def grant(self, ttl: int, *, lease_id: int = 0,
                    timeout: float | None = None) -> Lease:
        """A new lease of ``ttl`` seconds. ``lease_id`` (0: etcd chooses) makes the grant
        repeatable: a second grant of the same ID raises ``LeaseExists`` instead of leaving
        a second lease (a grant whose answer was lost may have been applied)."""
        body = {"TTL": str(int(ttl))}
        if lease_id:
            body["ID"] = str(int(lease_id))
        ep, answer = await self.write("/v3/lease/grant", body, timeout, "lease grant")
        lease = Lease(id=codec.as_int(answer, "ID"), ttl=codec.as_int(answer, "TTL"))
        if not lease.id or lease.ttl <= 0:
            raise BadResponse(f"{ep}: lease grant answered {answer!r}")
        return lease

    async def keepalive(self, lease_id: int, *, timeout: float | None = None) -> int:
        """Renew the lease; its remaining TTL. LeaseExpired when etcd no longer has it."""
        _, answer = await self.read("/v3/lease/keepalive", {"ID": str(lease_id)}, timeout,
                                    "lease keepalive")
        result = codec.as_dict(answer.get("result", {}), "keepalive result")
        ttl = codec.as_int(result, "TTL")
        if ttl <= 0:
            raise LeaseExpired(f"lease {lease_id:x} has expired")
        return ttl

    async def revoke(self, lease_id: int, *, timeout: float | None = None) -> None:
        """Revoke the lease (its keys vanish). A lease already gone is not an error."""
        try:
            await self.write("/v3/lease/revoke", {"ID": str(lease_id)}, timeout, "lease revoke")
        except LeaseExpired:
            pass

    async def time_to_live(self, lease_id: int, *, timeout: float | None = None) -> int:
        """Remaining TTL in seconds; LeaseExpired when the lease is gone."""
        _, answer = await self.read("/v3/lease/timetolive", {"ID": str(lease_id)}, timeout,
                                    "lease time-to-live")
        ttl = codec.as_int(answer, "TTL")
        if ttl < 0:
            raise LeaseExpired(f"lease {lease_id:x} has expired")
        return ttl

    # ------------------------------------------------------------------ cluster

    async def members(self, *, timeout: float | None = None) -> tuple[Member, ...]:
        _, answer = await self.read("/v3/cluster/member/list", {}, timeout, "member list")
        raw = answer.get("members", [])
        if not isinstance(raw, list):
            raise BadResponse("member list: members is not a list")
        return tuple(codec.member(m) for m in raw)

    async def alarms(self, *, timeout: float | None = None) -> tuple[Alarm, ...]:
        """The alarms raised in the cluster (``/v3/maintenance/alarm``, action GET; hedged like
        every read). An empty tuple: no alarm. ``NOSPACE``: etcd refuses writes."""
        _, answer = await self.read("/v3/maintenance/alarm", {"action": "GET"}, timeout,
                                    "alarm list")
        return codec.alarms(answer)

    async def endpoint_status(self, endpoint: str, *,
                              timeout: float | None = None) -> EndpointStatus:
        """``/v3/maintenance/status`` of one member (no hedging: that member is the question)."""
        deadline = self.deadline(timeout)
        endpoint = endpoint.rstrip("/")

        async def call() -> dict[str, Any]:
            return await self.transport.post(endpoint, "/v3/maintenance/status", {})

        try:
            async with asyncio.timeout_at(deadline):
                answer = await self.session.authed(call, deadline)
        except TimeoutError:
            raise Timeout(f"{endpoint}: status: no answer within the deadline") from None
        status = codec.endpoint_status(answer, endpoint)
        self.note_revision(status.revision, status.cluster_id)
        return status

    async def quota_bytes(self, endpoint: str, *, timeout: float | None = None) -> int:
        """The backend quota of one member (``--quota-backend-bytes``), read from its own
        gauge ``etcd_server_quota_backend_bytes`` on ``/metrics`` (etcd 3.4 and later): read
        line by line, at most ``QUOTA_SCAN_BYTES``, stopped at the gauge. The quota is a flag
        of the member, in no API answer."""
        deadline = self.deadline(timeout)
        endpoint = endpoint.rstrip("/")
        try:
            async with asyncio.timeout_at(deadline):
                return await scan_quota(self.transport, endpoint)
        except TimeoutError:
            raise Timeout(f"{endpoint}: quota: no answer within the deadline") from None

    async def quotas(self, *, timeout: float | None = None) -> dict[str, int | StoreError]:
        """The quota of every configured endpoint, asked concurrently within one deadline."""
        return await self._each_endpoint(
            lambda ep: self.quota_bytes(ep, timeout=timeout))

    async def statuses(self, *, timeout: float | None = None
                       ) -> dict[str, EndpointStatus | StoreError]:
        """The status of every configured endpoint, asked concurrently within one deadline."""
        return await self._each_endpoint(
            lambda ep: self.endpoint_status(ep, timeout=timeout))

    async def _each_endpoint(self, ask: Callable[[str], Awaitable[T]]
                             ) -> dict[str, T | StoreError]:
        """``ask`` of every configured endpoint concurrently: its answer or its StoreError;
        any other exception is a bug, not an etcd answer, and is raised."""
        eps = self.config.endpoints
        results = await asyncio.gather(*(ask(ep) for ep in eps), return_exceptions=True)
        out: dict[str, T | StoreError] = {}
        for ep, res in zip(eps, results, strict=True):
            if isinstance(res, BaseException) and not isinstance(res, StoreError):
                raise res
            out[ep] = res
        return out

    # ------------------------------------------------------------------ watch

    def watch(self, key: str, *, prefix: bool = False, start_revision: int | None = None,
              stall_after: float = 3.0, max_message_bytes: int | None = None) -> Watch:
        """An async iterator of WatchBatch (also an async context manager; see watch.py).
        One watch message over ``max_message_bytes`` (default and ceiling:
        ``max_answer_bytes``) raises ``WatchMessageTooLarge`` once; the watch goes on."""
        return Watch(self.session, key, prefix=prefix, start_revision=start_revision,
                     stall_after=stall_after, max_message_bytes=max_message_bytes)

    # ------------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        await self.session.close()

    async def __aenter__(self) -> EtcdStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
