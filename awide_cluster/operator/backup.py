"""``awide-cluster backup``: a snapshot of one etcd member, taken through etcd's Maintenance API
(``/v3/maintenance/snapshot``, a stream of base64 chunks) with the store's HTTP client.

The file is etcd's own snapshot format, the one ``etcdctl snapshot save`` writes: the member's
database followed by the sha256 of it that etcd appends (``etcdutl snapshot restore`` checks
it). Bounded: at most ``max_bytes`` bytes and ``timeout`` seconds in all, each stream message
at most ``MAX_MESSAGE_BYTES``. Written atomically: into a temporary file (mode 0600) beside
the target, checked against etcd's trailing sha256, flushed to disk, then renamed; on any
failure the temporary file is removed and the target is untouched.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from awide_cluster.store import codec
from awide_cluster.store.errors import BadResponse, StoreError, TooLarge, Unavailable
from awide_cluster.store.etcd import EtcdStore
from awide_cluster.store.transport import LineReader

SNAPSHOT_PATH = "/v3/maintenance/snapshot"
TRAILER = 32                        # etcd appends the sha256 of the database
MAX_MESSAGE_BYTES = 1 << 20         # etcd sends 32 KiB chunks (about 44 kB in base64)
DEFAULT_MAX_BYTES = 8 << 30         # etcd's largest advised quota
DEFAULT_TIMEOUT = 600.0


class BackupError(Exception):
    """The snapshot was not written (the message says why); the target is untouched."""


@dataclass(frozen=True, slots=True)
class BackupFile:
    path: Path
    size: int                       # bytes of the file
    sha256: str                     # of the whole file (hex), as sha256sum prints it
    endpoint: str                   # the member it was taken from
    revision: int                   # the member's revision when asked: the snapshot's is this
                                    # or later (etcd's snapshot stream carries none)

    def describe(self) -> str:
        return (f"{self.path}: {self.size} bytes, sha256 {self.sha256}, from {self.endpoint} "
                f"at revision {self.revision} or later")


class _Stream:
    """What has arrived: the whole file's sha256 and the database's (lagging the last 32
    bytes, which are etcd's sha256 of the database once the stream ends)."""

    def __init__(self, out: IO[bytes], max_bytes: int) -> None:
        self.out = out
        self.max_bytes = max_bytes
        self.size = 0
        self.file_hash = hashlib.sha256()
        self.db_hash = hashlib.sha256()
        self.tail = b""
        self.revision = 0

    def add(self, blob: bytes) -> None:
        if self.size + len(blob) > self.max_bytes:
            raise TooLarge(f"snapshot over the bound of {self.max_bytes} bytes, refused",
                           what="snapshot", limit=self.max_bytes)
        self.out.write(blob)
        self.size += len(blob)
        self.file_hash.update(blob)
        data = self.tail + blob
        self.db_hash.update(data[:-TRAILER])
        self.tail = data[-TRAILER:]

    def check(self, endpoint: str) -> None:
        if self.size <= TRAILER:
            raise BadResponse(f"{endpoint}: snapshot of {self.size} bytes: too short")
        if self.db_hash.digest() != self.tail:
            raise BadResponse(f"{endpoint}: snapshot does not match the sha256 etcd appended "
                              "to it (cut or damaged on the way)")


def _message(line: bytes, endpoint: str) -> dict[str, object]:
    body = codec.parse_json(line)
    if "error" in body:
        raise codec.error_from_body(body, 200)
    return codec.as_dict(body.get("result", {}), f"{endpoint}: snapshot message")


async def _receive(store: EtcdStore, endpoint: str, stream: _Stream) -> None:
    status = await store.transport.post(endpoint, "/v3/maintenance/status", {})
    stream.revision = codec.header_revision(status)
    resp = await store.transport.open_stream(endpoint, SNAPSHOT_PATH, {})
    try:
        reader = LineReader(resp, MAX_MESSAGE_BYTES, what="snapshot message")
        first = True
        while (line := await reader.next_line()) is not None:
            result = _message(line, endpoint)
            if first:
                first = False
                remaining = codec.as_int(result, "remaining_bytes")
                if remaining > stream.max_bytes:
                    raise TooLarge(f"{endpoint}: snapshot of {remaining} bytes over the bound "
                                   f"of {stream.max_bytes} bytes, refused", what="snapshot",
                                   limit=stream.max_bytes)
            blob = result.get("blob", "")
            if not isinstance(blob, str):
                raise BadResponse(f"{endpoint}: snapshot blob is not base64 text")
            try:
                stream.add(base64.b64decode(blob, validate=True))
            except binascii.Error as exc:
                raise BadResponse(f"{endpoint}: snapshot blob is not base64: {exc}") from None
    finally:
        resp.close()
    stream.check(endpoint)


async def take_snapshot(store: EtcdStore, out: Path, *, endpoint: str | None = None,
                        max_bytes: int = DEFAULT_MAX_BYTES, timeout: float = DEFAULT_TIMEOUT,
                        replace: bool = False) -> BackupFile:
    """Save a snapshot of ``endpoint`` (default: the first configured member that sends one)
    to ``out``; ``BackupError`` saying why when none was written."""
    out = Path(out)
    if out.exists() and not replace:
        raise BackupError(f"{out} exists (give --force to replace it)")
    if not out.parent.is_dir():
        raise BackupError(f"no directory {out.parent}")
    endpoints = [endpoint.rstrip("/")] if endpoint else list(store.config.endpoints)
    failures: list[str] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    for ep in endpoints:
        fd, tmp_name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".part")
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as f:
                stream = _Stream(f, max_bytes)
                try:
                    async with asyncio.timeout_at(deadline):
                        await _authed_receive(store, ep, stream, deadline)
                except TimeoutError:
                    raise BackupError(f"{ep}: snapshot not complete within {timeout:g} s "
                                      f"({stream.size} bytes received)") from None
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, out)
            _fsync_dir(out.parent)
            return BackupFile(path=out, size=stream.size, sha256=stream.file_hash.hexdigest(),
                            endpoint=ep, revision=stream.revision)
        except (Unavailable, BadResponse) as exc:
            failures.append(f"{type(exc).__name__}: {exc}")  # another member may send one
        except StoreError as exc:
            raise BackupError(f"{ep}: {type(exc).__name__}: {exc}") from None
        finally:
            tmp.unlink(missing_ok=True)
        if loop.time() >= deadline:
            break
    raise BackupError("no member sent a complete snapshot: " + "; ".join(failures))


async def _authed_receive(store: EtcdStore, endpoint: str, stream: _Stream,
                          deadline: float) -> None:
    """With the store's token (authenticating first when it has credentials); a rejected
    token is renewed once. A retry starts the file again: only the first attempt may have
    written to it, and a rejection comes before any data."""

    async def call() -> None:
        await _receive(store, endpoint, stream)

    await store.session.authed(call, deadline)     # the store's own token handling


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
