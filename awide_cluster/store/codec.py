"""etcd v3 JSON (grpc-gateway) <-> the store's types. Pure functions, no I/O.

The gateway speaks proto3 JSON: bytes fields are base64, int64 fields are strings, fields at
their default value (0, false, empty, enum 0) are left out. Errors come as
``{"error": "...", "code": <gRPC code>, "message": "..."}`` (unary calls) or
``{"error": {"grpc_code": N, "message": "..."}}`` (inside a stream).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from awide_cluster.store.errors import (
    BadResponse,
    Denied,
    InvalidRequest,
    LeaseExists,
    LeaseExpired,
    NoSpace,
    StoreError,
    Timeout,
    Unavailable,
)
from awide_cluster.store.timeline import Claim
from awide_cluster.store.types import (
    Alarm,
    Compare,
    Delete,
    EndpointStatus,
    Get,
    KeyValue,
    Member,
    Put,
    RangeResult,
    TxnResult,
    WatchEvent,
)

# gRPC status codes used by etcd
_CANCELLED, _UNKNOWN, _INVALID_ARGUMENT, _DEADLINE_EXCEEDED, _NOT_FOUND = 1, 2, 3, 4, 5
_PERMISSION_DENIED, _RESOURCE_EXHAUSTED, _FAILED_PRECONDITION, _OUT_OF_RANGE = 7, 8, 9, 11
_UNAVAILABLE, _UNAUTHENTICATED = 14, 16

_TARGETS = {"version": "VERSION", "create": "CREATE", "mod": "MOD", "value": "VALUE",
            "lease": "LEASE"}
_TARGET_FIELDS = {"version": "version", "create": "create_revision", "mod": "mod_revision",
                  "value": "value", "lease": "lease"}
_RESULTS = {"equal": "EQUAL", "not_equal": "NOT_EQUAL", "greater": "GREATER", "less": "LESS"}


class TokenRejected(Denied):
    """The auth token is invalid or stale: authenticate again, then repeat the call once."""


class AuthNotEnabled(StoreError):
    """Credentials were configured but the cluster has auth disabled."""


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: Any) -> bytes:
    if not isinstance(text, str):
        raise BadResponse(f"expected base64 text, got {type(text).__name__}")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BadResponse(f"bad base64 in answer: {text[:40]!r}") from exc


def prefix_end(key: bytes) -> bytes:
    """The range_end that selects every key starting with ``key``."""
    trimmed = key.rstrip(b"\xff")
    if not trimmed:
        return b"\x00"  # all keys >= key
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


def as_int(obj: Mapping[str, Any], field: str, default: int = 0) -> int:
    value = obj.get(field, default)
    if isinstance(value, bool):
        raise BadResponse(f"field {field!r} is not an integer: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise BadResponse(f"field {field!r} is not an integer: {value!r}")


def as_bool(obj: Mapping[str, Any], field: str) -> bool:
    value = obj.get(field, False)
    if not isinstance(value, bool):
        raise BadResponse(f"field {field!r} is not a boolean: {value!r}")
    return value


def b64_size(text: Any) -> int:
    """The size in bytes of the data a base64 text holds, without decoding it."""
    if not isinstance(text, str):
        raise BadResponse(f"expected base64 text, got {type(text).__name__}")
    n = len(text)
    return n // 4 * 3 - (2 if text.endswith("==") else 1 if text.endswith("=") else 0)


def as_dict(obj: Any, what: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise BadResponse(f"{what}: expected a JSON object, got {type(obj).__name__}")
    return obj


def header_revision(body: Mapping[str, Any]) -> int:
    """header.revision of an answer, 0 when the answer carries none (e.g. member list)."""
    return header_claim(body).revision


def header_claim(body: Mapping[str, Any]) -> Claim:
    """header.cluster_id and header.revision of an answer (0 when not said)."""
    header = body.get("header")
    if header is None and isinstance(body.get("result"), dict):  # a stream answer (keepalive)
        header = body["result"].get("header")
    h = as_dict(header or {}, "header")
    return Claim(cluster_id=as_uint64(h, "cluster_id"), revision=as_int(h, "revision"))


def as_uint64(obj: Mapping[str, Any], field: str) -> int:
    """An unsigned 64-bit field (etcd's ids), 0 when absent."""
    raw = obj.get(field, 0)
    try:
        value = int(raw) if isinstance(raw, (int, str)) and not isinstance(raw, bool) else -1
    except ValueError:
        value = -1
    if not 0 <= value < 2**64:
        raise BadResponse(f"{field}: not an unsigned 64-bit number: {str(raw)[:40]!r}")
    return value


def range_body(start: bytes, end: bytes | None, *, limit: int = 0, revision: int | None = None,
               min_mod_revision: int | None = None, keys_only: bool = False,
               count_only: bool = False, serializable: bool = False) -> dict[str, Any]:
    """A ``/v3/kv/range`` request for the full keys [start, end) (``end`` None: one key)."""
    body: dict[str, Any] = {"key": b64(start)}
    if end is not None:
        body["range_end"] = b64(end)
    if limit:
        body["limit"] = str(int(limit))
    if revision:
        body["revision"] = str(int(revision))
    if min_mod_revision:
        body["min_mod_revision"] = str(int(min_mod_revision))
    if keys_only:
        body["keys_only"] = True
    if count_only:
        body["count_only"] = True
    if serializable:
        body["serializable"] = True
    return body


def to_bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


@dataclass(frozen=True)
class Codec:
    """Request builders and answer parsers bound to one key prefix."""

    prefix: str

    # ------------------------------------------------------------------ keys

    def key(self, rel: str) -> bytes:
        # surrogateescape: a key read back with undecodable bytes (``rel``) names itself again
        return (self.prefix + rel).encode(errors="surrogateescape")

    def rel(self, raw: Any) -> str:
        full = unb64(raw).decode(errors="surrogateescape")
        if not full.startswith(self.prefix):
            raise BadResponse(f"key outside the store prefix {self.prefix!r}: {full!r}")
        return full[len(self.prefix):]

    def key_range(self, rel: str, prefix: bool) -> dict[str, str]:
        k = self.key(rel)
        out = {"key": b64(k)}
        if prefix:
            out["range_end"] = b64(prefix_end(k))
        return out

    # ------------------------------------------------------------------ requests

    def range_request(self, rel: str, *, prefix: bool = False, min_mod_revision: int | None = None,
                      serializable: bool = False, keys_only: bool = False,
                      limit: int = 0, revision: int | None = None,
                      count_only: bool = False) -> dict[str, Any]:
        k = self.key(rel)
        return range_body(k, prefix_end(k) if prefix else None, limit=limit, revision=revision,
                          min_mod_revision=min_mod_revision, keys_only=keys_only,
                          count_only=count_only, serializable=serializable)

    def put_request(self, rel: str, value: bytes | str, lease: int = 0) -> dict[str, Any]:
        body: dict[str, Any] = {"key": b64(self.key(rel)), "value": b64(to_bytes(value))}
        if lease:
            body["lease"] = str(int(lease))
        return body

    def compare(self, c: Compare) -> dict[str, Any]:
        if c.target not in _TARGETS or c.result not in _RESULTS:
            raise ValueError(f"bad compare {c!r}")
        out: dict[str, Any] = {"key": b64(self.key(c.key)), "target": _TARGETS[c.target],
                               "result": _RESULTS[c.result]}
        field = _TARGET_FIELDS[c.target]
        if c.target == "value":
            if not isinstance(c.value, (bytes, str)):
                raise ValueError("a value compare needs bytes")
            out[field] = b64(to_bytes(c.value))
        else:
            if not isinstance(c.value, int):
                raise ValueError(f"a {c.target} compare needs an int")
            out[field] = str(c.value)
        return out

    def op(self, op: Put | Delete | Get) -> dict[str, Any]:
        if isinstance(op, Put):
            return {"request_put": self.put_request(op.key, op.value, op.lease)}
        if isinstance(op, Delete):
            return {"request_delete_range": self.key_range(op.key, op.prefix)}
        if isinstance(op, Get):
            return {"request_range": self.key_range(op.key, op.prefix)}
        raise TypeError(f"not a txn op: {op!r}")

    def txn_request(self, compares: Iterable[Compare], success: Iterable[Put | Delete | Get],
                    failure: Iterable[Put | Delete | Get]) -> dict[str, Any]:
        return {"compare": [self.compare(c) for c in compares],
                "success": [self.op(o) for o in success],
                "failure": [self.op(o) for o in failure]}

    def watch_request(self, rel: str, prefix: bool, start_revision: int | None) -> dict[str, Any]:
        create: dict[str, Any] = {**self.key_range(rel, prefix), "progress_notify": True}
        if start_revision:
            create["start_revision"] = str(start_revision)
        return {"create_request": create}

    # ------------------------------------------------------------------ answers

    def kv(self, obj: Any) -> KeyValue:
        d = as_dict(obj, "kv")
        return KeyValue(
            key=self.rel(d.get("key", "")),
            value=unb64(d.get("value", "")),
            create_revision=as_int(d, "create_revision"),
            mod_revision=as_int(d, "mod_revision"),
            version=as_int(d, "version"),
            lease=as_int(d, "lease"),
        )

    def range_result(self, body: Mapping[str, Any], endpoint: str = "") -> RangeResult:
        kvs = body.get("kvs", [])
        if not isinstance(kvs, list):
            raise BadResponse("kvs is not a list")
        return RangeResult(revision=header_revision(body), kvs=tuple(self.kv(k) for k in kvs),
                           count=as_int(body, "count"), endpoint=endpoint,
                           more=as_bool(body, "more"))

    def txn_result(self, body: Mapping[str, Any], ops: tuple[Put | Delete | Get, ...],
                   endpoint: str = "") -> TxnResult:
        succeeded = body.get("succeeded", False)
        if not isinstance(succeeded, bool):
            raise BadResponse("succeeded is not a boolean")
        raw = body.get("responses", [])
        if not isinstance(raw, list) or len(raw) != len(ops):
            raise BadResponse(f"txn answered {len(raw) if isinstance(raw, list) else raw!r} "
                              f"responses for {len(ops)} ops")
        responses: list[RangeResult | None] = []
        for op, r in zip(ops, raw, strict=True):
            r = as_dict(r, "txn response")
            if isinstance(op, Get):
                responses.append(self.range_result(as_dict(r.get("response_range", {}), "range"),
                                                   endpoint))
            else:
                responses.append(None)
        return TxnResult(succeeded=succeeded, revision=header_revision(body),
                         responses=tuple(responses))

    def event(self, obj: Any) -> WatchEvent:
        d = as_dict(obj, "event")
        kind = d.get("type", "PUT")
        if kind not in ("PUT", "DELETE"):
            raise BadResponse(f"unknown event type {kind!r}")
        return WatchEvent(kind="put" if kind == "PUT" else "delete", kv=self.kv(d.get("kv", {})))


def member(obj: Any) -> Member:
    d = as_dict(obj, "member")
    return Member(id=as_int(d, "ID"), name=str(d.get("name", "")),
                  client_urls=tuple(str(u) for u in d.get("clientURLs", []) or []),
                  peer_urls=tuple(str(u) for u in d.get("peerURLs", []) or []),
                  is_learner=d.get("isLearner") is True)


def endpoint_status(body: Mapping[str, Any], endpoint: str) -> EndpointStatus:
    header = as_dict(body.get("header", {}), "header")
    claim = header_claim(body)
    return EndpointStatus(
        endpoint=endpoint, member_id=as_int(header, "member_id"), leader=as_int(body, "leader"),
        raft_term=as_int(body, "raftTerm"), raft_index=as_int(body, "raftIndex"),
        version=str(body.get("version", "")), db_size=as_int(body, "dbSize"),
        errors=tuple(str(e) for e in body.get("errors", []) or []),
        # never 0 in a real member: an absent field (the JSON gateway drops zeros) is unknown
        db_size_in_use=as_int(body, "dbSizeInUse") or None,
        cluster_id=claim.cluster_id, revision=claim.revision,
    )


def alarms(body: Mapping[str, Any]) -> tuple[Alarm, ...]:
    """The alarm list of a ``/v3/maintenance/alarm`` GET answer (bounded: at most 64)."""
    raw = body.get("alarms", []) or []
    if not isinstance(raw, list):
        raise BadResponse("alarm list: alarms is not a list")
    out = []
    for a in raw[:64]:
        d = as_dict(a, "alarm")
        kind = d.get("alarm", "NONE")
        if not isinstance(kind, str) or len(kind) > 32:
            raise BadResponse(f"alarm list: alarm type is not a short string: {kind!r:.60}")
        out.append(Alarm(member_id=as_int(d, "memberID"), alarm=kind))
    return tuple(out)


@dataclass(frozen=True)
class WatchFrame:
    revision: int
    created: bool
    canceled: bool
    compact_revision: int
    cancel_reason: str
    events: tuple[Any, ...]   # raw events, decoded by Codec.event
    cluster_id: int = 0


def watch_frame(line: bytes) -> WatchFrame:
    body = parse_json(line)
    if "error" in body:
        raise error_from_body(body, status=200)
    result = as_dict(body.get("result"), "watch result")
    events = result.get("events", [])
    if not isinstance(events, list):
        raise BadResponse("events is not a list")
    claim = header_claim(result)
    return WatchFrame(
        revision=claim.revision, cluster_id=claim.cluster_id,
        created=bool(result.get("created", False)),
        canceled=bool(result.get("canceled", False)),
        compact_revision=as_int(result, "compact_revision"),
        cancel_reason=str(result.get("cancel_reason", "")), events=tuple(events))


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadResponse(f"answer is not JSON: {raw[:80]!r}") from exc
    return as_dict(body, "answer")


def error_from_body(body: Mapping[str, Any], status: int, *, write: bool = False) -> StoreError:
    """The typed error for an etcd error answer (unary or stream form)."""
    err = body.get("error")
    if isinstance(err, dict):  # stream form
        code = err.get("grpc_code", 0)
        message = str(err.get("message", ""))
    else:
        code = body.get("code", 0)
        message = str(body.get("message") or err or "")
    if not isinstance(code, int):
        code = 0
    return error_for(code, message, status, write=write)


# etcd gives one gRPC code to errors that must be told apart. Under those codes only, etcd's
# fixed error strings (its rpctypes table) say which error it is (docs/store.md, "Typed errors
# only"): the first fragment found names the type.
_BY_MESSAGE: dict[int, tuple[tuple[str, type[StoreError]], ...]] = {
    _INVALID_ARGUMENT: (("authentication failed", Denied), ("user name is empty", Denied),
                        ("revision of auth store is old", TokenRejected),
                        ("revision in header is old", TokenRejected)),
    _FAILED_PRECONDITION: (("authentication is not enabled", AuthNotEnabled),
                           ("user name not found", Denied),
                           ("lease already exists", LeaseExists)),
    _NOT_FOUND: (("lease not found", LeaseExpired),),
    _RESOURCE_EXHAUSTED: (("database space exceeded", NoSpace),),
}
# Under Unavailable, the errors etcd raises before it proposes a write (never applied); the
# others under that code ("leader changed", "request timed out", "server stopped") may have been.
_NOT_PROPOSED = ("no leader", "not capable", "unhealthy cluster")
# etcd's JSON gateway under --client-cert-auth with auth on (plain text, HTTP 400, no code)
_GATEWAY_CN = "commonname of client sending a request against gateway will be ignored"
_REFUSED_AS_SUCH = (_INVALID_ARGUMENT, _FAILED_PRECONDITION, _NOT_FOUND, _OUT_OF_RANGE)


def error_for(code: int, message: str, status: int, *, write: bool = False) -> StoreError:
    """The typed error of an etcd error answer: decided by its gRPC code; etcd's own error
    string is read only to tell apart the errors etcd gives one code (``_BY_MESSAGE``,
    ``_NOT_PROPOSED``); without a code (a proxy's answer), by the HTTP status."""
    text = f"etcd: {message or 'HTTP ' + str(status)} (code {code})"
    low = message.lower()
    for fragment, kind in _BY_MESSAGE.get(code, ()):
        if fragment in low:
            return kind(text)
    if code == _UNAUTHENTICATED:
        return TokenRejected(text)
    if code == 0 and _GATEWAY_CN in low:
        return Denied(f"{text}: under --client-cert-auth with authentication on, etcd's JSON "
                      "gateway serves no request; give this client a password over TLS "
                      "(docs/security.md, etcd roles)")
    if code == _PERMISSION_DENIED:
        return Denied(text)
    if code in _REFUSED_AS_SUCH:
        return InvalidRequest(text)
    if code == _DEADLINE_EXCEEDED:
        return Timeout(text, maybe_applied=write)
    if code == _RESOURCE_EXHAUSTED:             # "too many requests": refused, not proposed
        return Unavailable(text)
    if code == _UNAVAILABLE:
        return Unavailable(text, maybe_applied=write and not any(s in low for s in _NOT_PROPOSED))
    if code > 0:                                # cancelled, unknown, internal...: may have been
        return Unavailable(text, maybe_applied=write)
    if status in (401, 403):
        return Denied(text)
    if status >= 500:
        return Unavailable(text, maybe_applied=write)
    return BadResponse(f"unexpected answer HTTP {status}: {message[:200]!r}")
