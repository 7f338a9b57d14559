"""``read_many``: several keys and prefixes in one request (a read-only transaction of ranges, one
revision for all), each answered exactly as ``get_range``/``read_prefix`` answer it (a ranged
key as ``range`` does: the transaction's revision and the key's count with its value). Only the
plain case is taken from the transaction: a key or prefix with a refusal remembered, a value
over its bound, a prefix whose keys fill a page, a transaction answer over its bound, or a
transaction refused for space (etcd 3.5 refuses even a read-only one while its quota alarm is
raised) is read again by ``get_range``/``read_prefix`` (within the same deadline), so every
refusal is made and remembered by the code that makes it for a single read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from awide_cluster.store import codec
from awide_cluster.store.bounded import (
    ANSWER_OVERHEAD,
    MAX_KEY_BYTES,
    MAX_PAGE_KEYS,
    RangeSource,
    answer_entries,
    kv_bound,
    remaining,
)
from awide_cluster.store.codec import prefix_end, range_body
from awide_cluster.store.errors import BadResponse, NoSpace, TooLarge
from awide_cluster.store.types import (
    FolderRead,
    KeyRead,
    KeyValue,
    ManyGot,
    ManyRead,
    PrefixRead,
    RangeResult,
    Refusal,
)

UNBOUNDED = 1 << 62         # a key read without a value bound: only the answer's bound holds


Alone = Callable[[ManyRead, float], Awaitable[ManyGot]]


async def read_many(store: RangeSource, reads: Iterable[ManyRead], alone: Alone, *,
                    timeout: float | None = None) -> list[ManyGot]:
    """Each read of ``reads``, in order: for a ``KeyRead`` its KeyValue, None (absent) or the
    ``ValueTooLarge`` that ``get_range`` raises (returned, not raised), a ranged one's
    ``RangeResult`` in place of the KeyValue or None; for a ``FolderRead``
    the ``PrefixRead`` of ``read_prefix``. One request (a read-only transaction) when every
    read is plain; the others (see the module docstring) are read by ``alone(read, timeout
    left)`` (the store's own ``get``/``read_prefix``), concurrently, within the same deadline.
    Raises StoreError when any read fails."""
    asked = tuple(reads)
    deadline = store.deadline(timeout)
    memory = store.refusals
    ops: list[dict[str, Any]] = []
    batch: list[int] = []
    cap: int | None = ANSWER_OVERHEAD
    for i, r in enumerate(asked):
        if isinstance(r, KeyRead):
            if r.max_value_bytes is not None and memory.get(r.key) is not None:
                continue
            ops.append({"request_range": range_body(store.codec.key(r.key), None)})
            cap = (None if cap is None or r.max_value_bytes is None
                   else cap + ANSWER_OVERHEAD + kv_bound(store, r.max_value_bytes))
        else:
            if any(x.size > r.max_value_bytes for x in memory.under(r.prefix)):
                continue
            start = store.codec.key(r.prefix)
            ops.append({"request_range": range_body(start, prefix_end(start),
                                                    limit=_folder_page(r))})
            cap = (None if cap is None
                   else cap + ANSWER_OVERHEAD + _folder_page(r) * kv_bound(store,
                                                                        r.max_value_bytes))
        batch.append(i)
    got: dict[int, ManyGot] = {}
    if len(batch) > 1:
        what = f"read_many of {len(batch)} reads"
        try:
            _, answer = await store.read("/v3/kv/txn", {"success": ops},
                                         remaining(store, deadline, what), what, max_bytes=cap)
            got = _many_answers(store, asked, batch, answer)
        except (TooLarge, NoSpace):
            # an answer over its bound; or etcd 3.5 refusing even a read-only transaction
            # while its space quota alarm is raised (plain ranges are still served): alone
            got = {}
    rest = [i for i in range(len(asked)) if i not in got]
    if rest:
        left = remaining(store, deadline, f"read_many of {len(asked)} reads")
        by_one = await asyncio.gather(*(alone(asked[i], left) for i in rest))
        got.update(zip(rest, by_one, strict=True))
    return [got[i] for i in range(len(asked))]


def _folder_page(r: FolderRead) -> int:
    return max(1, min(MAX_PAGE_KEYS, r.max_keys + 1))


def _many_answers(store: RangeSource, asked: tuple[ManyRead, ...], batch: list[int],
                  answer: dict[str, Any]) -> dict[int, ManyGot]:
    """The plain reads of a ``read_many`` transaction's answer, by index; a read that is not
    plain (see the module docstring) is left out, for ``_read_alone``."""
    responses = answer.get("responses", [])
    if not isinstance(responses, list) or len(responses) != len(batch):
        raise BadResponse(f"read_many: {len(batch)} ranges asked, answer holds "
                          f"{len(responses) if isinstance(responses, list) else 'no list'}")
    revision = codec.header_revision(answer)
    memory = store.refusals
    got: dict[int, ManyGot] = {}
    for i, item in zip(batch, responses, strict=True):
        rr = codec.as_dict(codec.as_dict(item, "txn response").get("response_range"),
                           "response_range")
        r = asked[i]
        bound = (UNBOUNDED if isinstance(r, KeyRead) and r.max_value_bytes is None
                 else r.max_value_bytes)
        assert bound is not None
        entries = answer_entries(store, rr, bound, MAX_KEY_BYTES)
        if any(isinstance(e, Refusal) for e in entries):
            continue
        kvs = tuple(e for e in entries if isinstance(e, KeyValue))
        if isinstance(r, KeyRead):
            if len(kvs) > 1 or (kvs and kvs[0].key != r.key):
                raise BadResponse(f"read_many: the answer for {r.key!r} holds other keys")
            memory.forget(r.key)
            got[i] = (RangeResult(revision=revision, kvs=kvs, count=codec.as_int(rr, "count"))
                      if r.ranged else kvs[0] if kvs else None)
            continue
        if codec.as_bool(rr, "more") or len(kvs) >= _folder_page(r):
            continue                    # a full page: read_prefix pages on
        if any(not kv.key.startswith(r.prefix) for kv in kvs):
            raise BadResponse(f"read_many: the answer for {r.prefix!r} holds other keys")
        memory.settle(r.prefix, None, ())
        got[i] = PrefixRead(prefix=r.prefix, revision=revision, kvs=kvs, refused={},
                            count=len(kvs), more=False, max_keys=r.max_keys)
    return got
