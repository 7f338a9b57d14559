"""Bounded reads: a value over its bound is refused by name, never read again unchanged.

Two reads build on the transport's per-answer bound (docs/store.md, "Bounded reads"):

``get_range`` (``EtcdStore.range(key, max_value_bytes=N)``): one key; the answer may hold
at most one value of ``N`` bytes. A value over ``N`` raises ``ValueTooLarge`` naming the key
and its mod_revision, and is remembered (``RefusalMemory``); while its mod_revision is
unchanged the next reads ask etcd with ``min_mod_revision`` = that revision + 1, so etcd
answers without the value and it is refused again at the cost of a few hundred bytes.

``read_prefix``: every key under a prefix, in pages of ``limit`` keys (continuing after the
last key read), the first page's revision pinned for the next ones (one snapshot; a
serializable read is not pinned, its pages may come from different members). Each page's
answer is bounded by ``limit`` values of the bound, and by the store's answer bound; a page
over that (a value far over the bound), or a page not answered within half the time left
(etcd builds a whole answer before it sends it: big values take it long), is listed
``keys_only`` and read key by key, so the one big value is refused by name and the others
are read. Every refusal is remembered as soon as it is made: a read that then runs out of
time still spares the next one. Remembered refusals are left out of the pages (the ranges stop
before them) and asked with ``min_mod_revision`` as above. More keys than ``max_keys`` is
reported (``more``, ``count``), never cut silently.

``read_many`` (``store/bounded_many.py``) reads several of these in one request.

A value is measured from its base64 text, before decoding: a refused value is never decoded.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from awide_cluster.store import codec
from awide_cluster.store.codec import b64, b64_size, prefix_end, range_body
from awide_cluster.store.errors import BadResponse, Timeout, TooLarge, ValueTooLarge
from awide_cluster.store.types import (
    KeyValue,
    PrefixRead,
    RangeResult,
    Refusal,
)

# JSON of one answer besides its kvs (header, count, more), and of one kv besides its key
# and value (revisions, version, lease, field names): generous upper bounds
ANSWER_OVERHEAD = 1024
KV_OVERHEAD = 512
MAX_KEY_BYTES = 512          # a key (relative to the store prefix) longer than this is refused
MAX_PAGE_KEYS = 64
PER_KEY_CONCURRENCY = 8      # key-by-key reads of a page that was too large
PAGE_SHARE = 0.5             # of the time left, a page may take before it is read key by key

Entry = KeyValue | Refusal


class RangeSource(Protocol):
    """What a bounded read needs of its store (``EtcdStore`` is one): the key codec, the
    deadline of a call, the refusals remembered, and hedged reads (every read goes through
    ``read``)."""

    @property
    def codec(self) -> codec.Codec: ...
    @property
    def refusals(self) -> RefusalMemory: ...

    def deadline(self, timeout: float | None) -> float: ...

    async def read(self, path: str, body: dict[str, Any], timeout: float | None, what: str, *,
                   max_bytes: int | None = None) -> tuple[str, dict[str, Any]]: ...


def encoded(size: int) -> int:
    """Bytes of the base64 text of ``size`` bytes."""
    return (size + 2) // 3 * 4


def kv_bound(store: RangeSource, max_value_bytes: int, max_key_bytes: int = MAX_KEY_BYTES) -> int:
    """The most one kv within the bounds takes in an answer."""
    key = len(store.codec.prefix.encode()) + max_key_bytes
    return encoded(max_value_bytes) + encoded(key) + KV_OVERHEAD


class RefusalMemory:
    """Values refused, by key, with their mod_revision: not read again while unchanged.

    Bounded: at most ``limit`` entries (the oldest go first); a prefix read drops the
    entries of its range it did not refuse again.
    """

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._items: dict[str, Refusal] = {}

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str) -> Refusal | None:
        return self._items.get(key)

    def remember(self, r: Refusal) -> None:
        self._items.pop(r.key, None)
        self._items[r.key] = r
        while len(self._items) > self.limit:
            del self._items[next(iter(self._items))]

    def forget(self, key: str) -> None:
        self._items.pop(key, None)

    def under(self, prefix: str) -> list[Refusal]:
        return [r for k, r in self._items.items() if k.startswith(prefix)]

    def settle(self, prefix: str, upto: str | None, refused: Iterable[str]) -> None:
        """After a whole read of ``prefix`` (up to key ``upto`` when it stopped early): forget
        the refusals of that range it did not make again (changed, deleted)."""
        keep = set(refused)
        for r in self.under(prefix):
            if (upto is None or r.key <= upto) and r.key not in keep:
                del self._items[r.key]


# ---------------------------------------------------------------------- one range call

@dataclass(frozen=True, slots=True)
class _Answer:
    revision: int
    entries: tuple[Entry, ...]
    count: int
    more: bool


def remaining(store: RangeSource, deadline: float, what: str) -> float:
    left = deadline - asyncio.get_running_loop().time()
    if left <= 0:
        raise Timeout(f"{what}: no answer within the deadline")
    return left


def answer_entries(store: RangeSource, answer: dict[str, Any], max_value_bytes: int,
             max_key_bytes: int) -> tuple[Entry, ...]:
    """The kvs of an answer; a value over the bound is measured, not decoded."""
    raw = answer.get("kvs", [])
    if not isinstance(raw, list):
        raise BadResponse("kvs is not a list")
    out: list[Entry] = []
    for item in raw:
        d = codec.as_dict(item, "kv")
        key = store.codec.rel(d.get("key", ""))
        mod = codec.as_int(d, "mod_revision")
        size = b64_size(d.get("value", ""))
        key_size = len(key.encode(errors="surrogateescape"))
        if key_size > max_key_bytes:      # refused whatever its value
            out.append(Refusal(key, mod, key_size, max_key_bytes, kind="key"))
        elif size > max_value_bytes:
            out.append(Refusal(key, mod, size, max_value_bytes))
        else:
            out.append(store.codec.kv(d))
    return tuple(out)


async def _call(store: RangeSource, body: dict[str, Any], *, deadline: float, what: str,
                max_bytes: int | None, max_value_bytes: int, max_key_bytes: int) -> _Answer:
    _, answer = await store.read("/v3/kv/range", body, remaining(store, deadline, what), what,
                                 max_bytes=max_bytes)
    return _Answer(revision=codec.header_revision(answer),
                   entries=answer_entries(store, answer, max_value_bytes, max_key_bytes),
                   count=codec.as_int(answer, "count"), more=codec.as_bool(answer, "more"))


# ---------------------------------------------------------------------- one key

# etcd's JSON gateway writes proto fields in declaration order: the header, then each kv's
# key, create_revision and mod_revision before its value. Only this exact shape is accepted.
_HEAD = re.compile(
    rb'\{"header":\{"cluster_id":"\d+","member_id":"\d+","revision":"(\d+)","raft_term":"\d+"\},'
    rb'"kvs":\[\{"key":"([A-Za-z0-9+/=]*)","create_revision":"\d+","mod_revision":"(\d+)",')


def refused_kv_head(head: bytes, key: bytes) -> tuple[int, int] | None:
    """(answer revision, mod_revision) of ``key`` from the first bytes of a refused one-key
    answer, when they have etcd's exact shape; None otherwise (then it is asked again)."""
    m = _HEAD.match(head)
    if m is None or m.group(2) != b64(key).encode():
        return None
    return int(m.group(1)), int(m.group(3))


async def get_one(store: RangeSource, key: str, *, max_value_bytes: int, deadline: float,
                  min_mod_revision: int | None = None, revision: int | None = None,
                  serializable: bool = False,
                  max_key_bytes: int = MAX_KEY_BYTES) -> tuple[Entry | None, int, int]:
    """One key under a bound: (KeyValue, Refusal or None (absent, or filtered out by
    ``min_mod_revision``), etcd's count, revision). Reads at most one value's bound: an
    answer over it names the value's mod_revision in its first bytes; if it does not (an
    answer of another shape), a keys-only read names it and, unless ``revision`` pins the
    read, one more bounded read at that revision confirms the value is the big one."""
    full = store.codec.key(key)
    what = f"get {key!r}"
    cap = ANSWER_OVERHEAD + kv_bound(store, max_value_bytes, max_key_bytes)
    try:
        a = await _call(store, range_body(full, None, revision=revision,
                                          min_mod_revision=min_mod_revision,
                                          serializable=serializable),
                        deadline=deadline, what=what, max_bytes=cap,
                        max_value_bytes=max_value_bytes, max_key_bytes=max_key_bytes)
        return (a.entries[0] if a.entries else None), a.count, a.revision
    except TooLarge as exc:
        seen = refused_kv_head(exc.head, full)
        if seen is not None:                 # the refused answer named the value's revision
            rev, mod = seen
            return Refusal(key, mod, max_value_bytes + 1, max_value_bytes, exact=False), 1, rev
    # over the answer bound: the value is far over its bound. Which revision is it?
    listing = await _call(store, range_body(full, None, revision=revision, keys_only=True,
                                            min_mod_revision=min_mod_revision,
                                            serializable=serializable),
                          deadline=deadline, what=what, max_bytes=None,
                          max_value_bytes=max_value_bytes, max_key_bytes=max_key_bytes)
    if not listing.entries:
        return None, listing.count, listing.revision      # deleted meanwhile
    mod = listing.entries[0].mod_revision
    if revision is None:
        # not pinned: confirm that the value at this mod_revision is the big one
        try:
            a = await _call(store, range_body(full, None, revision=listing.revision,
                                       min_mod_revision=min_mod_revision,
                                       serializable=serializable),
                            deadline=deadline, what=what, max_bytes=cap,
                            max_value_bytes=max_value_bytes, max_key_bytes=max_key_bytes)
            return (a.entries[0] if a.entries else None), a.count, a.revision
        except TooLarge:
            pass
    return (Refusal(key, mod, max_value_bytes + 1, max_value_bytes, exact=False),
            listing.count, listing.revision)


async def get_range(store: RangeSource, key: str, *, max_value_bytes: int,
                    min_mod_revision: int | None = None, serializable: bool = False,
                    timeout: float | None = None) -> RangeResult:
    """``range(key)`` whose value is at most ``max_value_bytes``; ``ValueTooLarge`` otherwise.
    A refused value is remembered and not read again while its mod_revision is unchanged."""
    deadline = store.deadline(timeout)
    memory = store.refusals
    known = memory.get(key)
    asked = min_mod_revision or 0
    if known is not None and known.size > max_value_bytes and asked <= known.mod_revision:
        entry, count, rev = await get_one(store, key, max_value_bytes=max_value_bytes,
                                          deadline=deadline, serializable=serializable,
                                          min_mod_revision=known.mod_revision + 1)
        if entry is None and count:
            raise _too_large(known)                        # unchanged: refused again
    else:
        entry, count, rev = await get_one(store, key, max_value_bytes=max_value_bytes,
                                          deadline=deadline, serializable=serializable,
                                          min_mod_revision=min_mod_revision)
    if isinstance(entry, Refusal):
        memory.remember(entry)
        raise _too_large(entry)
    memory.forget(key)
    return RangeResult(revision=rev, kvs=(entry,) if entry is not None else (), count=count)


def _too_large(r: Refusal) -> ValueTooLarge:
    return ValueTooLarge(f"{r.key!r} (mod_revision {r.mod_revision}): {r.why}, refused",
                         key=r.key, limit=r.limit, size=r.size, mod_revision=r.mod_revision)


# ---------------------------------------------------------------------- a prefix

async def read_prefix(store: RangeSource, prefix: str, *, max_keys: int, max_value_bytes: int,
                      timeout: float | None = None, serializable: bool = False,
                      page_keys: int | None = None,
                      max_key_bytes: int = MAX_KEY_BYTES) -> PrefixRead:
    """Every key under ``prefix`` (at most ``max_keys``), each value at most
    ``max_value_bytes``; one deadline for all its calls. See the module docstring."""
    if max_keys < 1 or max_value_bytes < 0:
        raise ValueError("read_prefix: max_keys >= 1 and max_value_bytes >= 0")
    deadline = store.deadline(timeout)
    what = f"read_prefix {prefix!r}"
    per_kv = kv_bound(store, max_value_bytes, max_key_bytes)
    page_keys = max(1, min(page_keys or MAX_PAGE_KEYS, MAX_PAGE_KEYS))
    memory = store.refusals
    skip = sorted((store.codec.key(r.key), r) for r in memory.under(prefix)
                  if r.size > max_value_bytes)
    start = store.codec.key(prefix)
    end = prefix_end(start)
    bounds = dict(max_value_bytes=max_value_bytes, max_key_bytes=max_key_bytes)

    out: list[Entry] = []
    pin: int | None = None
    first_revision = 0
    pos, i = start, 0
    while pos < end and len(out) <= max_keys:
        while i < len(skip) and skip[i][0] < pos:
            i += 1
        if i < len(skip) and skip[i][0] == pos:           # a remembered refusal
            known = skip[i][1]
            i += 1
            entry, count, rev = await get_one(
                store, known.key, deadline=deadline, revision=pin, serializable=serializable,
                min_mod_revision=known.mod_revision + 1, **bounds)
            if entry is None and count:
                entry = known                              # unchanged: refused again
            if entry is not None:
                _keep(memory, entry)
                out.append(entry)
            pin, first_revision = _pin(pin, first_revision, rev, serializable)
            pos = pos + b"\x00"
            continue
        seg_end = skip[i][0] if i < len(skip) else end
        limit = min(page_keys, max_keys + 1 - len(out))
        page = await _page(store, pos, seg_end, limit, pin=pin, deadline=deadline, what=what,
                           serializable=serializable, per_kv=per_kv, **bounds)
        pin, first_revision = _pin(pin, first_revision, page.revision, serializable)
        for e in page.entries:
            _keep(memory, e)
        out.extend(page.entries)
        if page.more and page.entries:
            pos = store.codec.key(page.entries[-1].key) + b"\x00"
        else:
            pos = seg_end
    more = len(out) > max_keys
    upto: str | None = None
    if more:
        out = out[:max_keys]
        upto = out[-1].key
        counted = await _call(store, range_body(start, end, revision=pin, count_only=True,
                                                 serializable=serializable),
                              deadline=deadline, what=what, max_bytes=ANSWER_OVERHEAD * 4,
                              **bounds)
        count = max(counted.count, max_keys + 1)
    else:
        count = len(out)
    refused = {e.key: e for e in out if isinstance(e, Refusal)}
    memory.settle(prefix, upto, refused)
    return PrefixRead(prefix=prefix, revision=first_revision,
                      kvs=tuple(e for e in out if isinstance(e, KeyValue)), refused=refused,
                      count=count, more=more, max_keys=max_keys)


def _keep(memory: RefusalMemory, e: Entry) -> None:
    """Remember a value refusal at once: a read that times out later still made progress."""
    if isinstance(e, Refusal) and e.kind == "value":
        memory.remember(e)


def _pin(pin: int | None, first: int, rev: int, serializable: bool) -> tuple[int | None, int]:
    first = first or rev
    if pin is None and not serializable and rev:
        pin = rev
    return pin, first


async def _page(store: RangeSource, pos: bytes, seg_end: bytes, limit: int, *, pin: int | None,
                deadline: float, what: str, serializable: bool, per_kv: int,
                max_value_bytes: int, max_key_bytes: int) -> _Answer:
    """Up to ``limit`` keys of [pos, seg_end); a page over its bound, or not answered within
    its share of the time left, is read key by key."""
    bounds = dict(max_value_bytes=max_value_bytes, max_key_bytes=max_key_bytes)
    loop = asyncio.get_running_loop()
    share = min(deadline, loop.time() + (deadline - loop.time()) * PAGE_SHARE)
    try:
        return await _call(store, range_body(pos, seg_end, limit=limit, revision=pin,
                                              serializable=serializable),
                           deadline=share, what=what,
                           max_bytes=ANSWER_OVERHEAD + limit * per_kv, **bounds)
    except TooLarge:
        pass
    except Timeout:
        if loop.time() >= deadline:
            raise
        # etcd builds a whole answer before sending it: big values take it long
    # one value (or more) far over the bound in this page: list the keys, read one by one
    while True:
        try:
            listing = await _call(store, range_body(pos, seg_end, limit=limit, revision=pin,
                                                     keys_only=True, serializable=serializable),
                                  deadline=deadline, what=what, max_bytes=None, **bounds)
            break
        except TooLarge:
            if limit == 1:
                raise
            limit = max(1, limit // 2)                     # keys that long: fewer per answer
    if pin is None and not serializable:
        pin = listing.revision
    gate = asyncio.Semaphore(PER_KEY_CONCURRENCY)

    async def one(e: Entry) -> Entry | None:
        if isinstance(e, Refusal):                         # a key over the key bound
            return e
        async with gate:
            got, _, _ = await get_one(store, e.key, deadline=deadline, revision=pin,
                                      serializable=serializable, **bounds)
        if got is not None:
            _keep(store.refusals, got)
        return got

    got = await asyncio.gather(*(one(e) for e in listing.entries))
    return _Answer(revision=listing.revision, entries=tuple(g for g in got if g is not None),
                   count=listing.count, more=listing.more)

