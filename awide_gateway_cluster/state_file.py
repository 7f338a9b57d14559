"""The gateway's state file: the last registry it accepted (and the key layout it verified),
kept on local disk so that a gateway started while etcd does not answer can serve the cards
it knew (docs/gateway.md, "Starting in an etcd outage").

File (JSON, mode 0600, replaced atomically: temp file, fsync, rename, fsync of the directory)::

    {"kind": "awide-gateway-state", "schema": 1, "cluster": "c1", "prefix": "/awide/c1/",
     "gateway": "gpu7-vllm-0", "saved_at": 1764750000.0, "lineage": "...", "generation": 42,
     "registry": "<the registry document, as etcd held it>",
     "layout": "<the layout record of the gateway's namespace>" | null}

The file is untrusted input like anything read from etcd: it is read with a size cap, its
registry decoded by the registry decoder and its slot table checked with the shared slot
function, its layout by the layout decoder. ``judge`` (pure) says why a decoded file must not
be applied: another cluster or prefix, a lineage or generation that does not match its
registry, a lineage other than the one already known, older than ``max_age``, saved in the
future. ``read`` never raises: it returns the state or the one-line reason it was refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from awide_cluster.contract import bounds, keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract.records import LayoutRecord, LayoutRecordError, decode_layout
from awide_cluster.contract.registry import Registry, RegistryError
from awide_cluster.contract.untrusted import clean_text

log = logging.getLogger("awide_gateway_cluster.state_file")

KIND = "awide-gateway-state"
SCHEMA = 1
# the registry document at its bound, escaped inside a JSON string (at most 2x for the
# characters a registry holds), plus the layout record and the envelope
MAX_BYTES = 2 * bounds.REGISTRY_MAX_BYTES + 64 * 1024
# a file saved this far in the future of the local clock is refused (clock stepped back)
FUTURE_SLACK = 300.0


class BadStateFile(ValueError):
    """The state file cannot be used; the message says why, in one line."""


@dataclass(frozen=True, slots=True)
class SavedState:
    cluster: str
    prefix: str
    gateway: str
    registry: Registry
    layout: LayoutRecord | None
    saved_at: float                     # wall clock (unix seconds) when written

    @property
    def lineage(self) -> str:
        return self.registry.lineage

    @property
    def generation(self) -> int:
        return self.registry.generation

    def describe(self, now: float) -> str:
        return (f"generation {self.generation} lineage {self.lineage or '-'} of cluster "
                f"{self.cluster}, saved {max(0.0, now - self.saved_at):.0f} s ago")


def path_for(directory: Path, gateway_id: str) -> Path:
    """The state file of one gateway in the state directory."""
    return directory / f"{gateway_id}.state.json"


def encode(state: SavedState) -> bytes:
    doc = {
        "kind": KIND, "schema": SCHEMA, "cluster": state.cluster, "prefix": state.prefix,
        "gateway": state.gateway, "saved_at": state.saved_at, "lineage": state.lineage,
        "generation": state.generation,
        "registry": regdoc.encode(state.registry).decode(),
        "layout": state.layout.encode().decode() if state.layout is not None else None,
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def decode(raw: bytes) -> SavedState:
    """Raises BadStateFile naming what is wrong, and nothing else."""
    if len(raw) > MAX_BYTES:
        raise BadStateFile(f"{len(raw)} bytes, over the bound of {MAX_BYTES}")
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise BadStateFile(f"not JSON: {clean_text(e, 120)}") from None
    if not isinstance(doc, dict):
        raise BadStateFile("not a JSON object")
    if doc.get("kind") != KIND:
        raise BadStateFile(f"kind is not {KIND!r}")
    if doc.get("schema") != SCHEMA or type(doc.get("schema")) is not int:
        raise BadStateFile(f"schema {clean_text(doc.get('schema'), 20)} is not known")
    texts = {}
    for field in ("cluster", "prefix", "gateway", "lineage", "registry"):
        v = doc.get(field)
        if not isinstance(v, str):
            raise BadStateFile(f"field {field}: missing or not a string")
        texts[field] = v
    saved_at, generation = doc.get("saved_at"), doc.get("generation")
    if isinstance(saved_at, bool) or not isinstance(saved_at, (int, float)) or not (
            0 < saved_at < 1e11):
        raise BadStateFile("field saved_at: missing or not a time")
    if isinstance(generation, bool) or not isinstance(generation, int):
        raise BadStateFile("field generation: missing or not an integer")
    try:
        reg = regdoc.decode(texts["registry"], key="<state file>")
    except RegistryError as e:
        raise BadStateFile(f"registry: {clean_text(e, 200)}") from None
    skew = regdoc.check_slots(reg)
    if skew is not None:
        raise BadStateFile(f"registry: {clean_text(skew, 200)}")
    if (reg.cluster, reg.lineage, reg.generation) != (
            texts["cluster"], texts["lineage"], generation):
        raise BadStateFile(
            f"its header (cluster {clean_text(texts['cluster'], 63)}, lineage "
            f"{clean_text(texts['lineage'], 20) or '-'}, generation {generation}) does not "
            f"match its registry (cluster {reg.cluster}, lineage {reg.lineage or '-'}, "
            f"generation {reg.generation})")
    layout_raw = doc.get("layout")
    layout: LayoutRecord | None = None
    if layout_raw is not None:
        if not isinstance(layout_raw, str):
            raise BadStateFile("field layout: not a string")
        try:
            layout = decode_layout(layout_raw, key="<state file>")
        except LayoutRecordError as e:
            raise BadStateFile(f"layout: {clean_text(e, 200)}") from None
    return SavedState(cluster=reg.cluster, prefix=texts["prefix"], gateway=texts["gateway"],
                      registry=reg, layout=layout, saved_at=float(saved_at))


def judge(saved: SavedState, *, cluster: str, now: float, max_age: float,
          known: Registry | None = None) -> str | None:
    """None when ``saved`` may be served; else why not (one line). ``known``: a registry this
    gateway already holds (from etcd), whose lineage the file must share."""
    prefix = keys.prefix(cluster)
    if saved.cluster != cluster or saved.prefix != prefix:
        return (f"it belongs to cluster {saved.cluster} (prefix {clean_text(saved.prefix, 80)}),"
                f" this gateway is in cluster {cluster} (prefix {prefix})")
    if known is not None and known.lineage != saved.lineage:
        return (f"its registry is of lineage {saved.lineage or '-'}, the registry known is of "
                f"lineage {known.lineage or '-'} (re-created since): an old lineage")
    age = now - saved.saved_at
    if age < -FUTURE_SLACK:
        return f"it was saved {-age:.0f} s in the future of this host's clock"
    if age > max_age:
        return f"it is {age:.0f} s old, over the limit of {max_age:.0f} s (state.max_age)"
    return None


def read(path: Path, *, cluster: str, now: float, max_age: float,
         known: Registry | None = None) -> SavedState | str:
    """The state saved at ``path`` if it may be served, else why not (one line)."""
    try:
        raw = _read_capped(path)
    except FileNotFoundError:
        return f"no state file at {path}"
    except OSError as e:
        return f"state file {path} refused: unreadable: {clean_text(e, 200)}"
    try:
        saved = decode(raw)
    except BadStateFile as e:
        return f"state file {path} refused: {e}"
    why = judge(saved, cluster=cluster, now=now, max_age=max_age, known=known)
    if why is not None:
        return f"state file {path} refused: {why}"
    return saved


def _read_capped(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(MAX_BYTES + 1)
    finally:
        os.close(fd)


def write(path: Path, state: SavedState) -> None:
    """Replace the file atomically: a temp file of mode 0600 in the same directory, written
    and fsynced, renamed over the file, and the directory fsynced."""
    data = encode(state)
    directory = path.parent
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = directory / f".{path.name}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class StateKeeper:
    """Writes the state off the event loop, the newest offered one at a time (an older one
    still waiting is replaced: only the last accepted registry matters)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pending: SavedState | None = None
        self._task: asyncio.Task[None] | None = None
        self.written = 0
        self.failures = 0

    def offer(self, state: SavedState) -> None:
        self._pending = state
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain(), name="awide-gateway-state")

    async def _drain(self) -> None:
        while self._pending is not None:
            state, self._pending = self._pending, None
            try:
                await asyncio.to_thread(write, self.path, state)
            except OSError as e:
                self.failures += 1
                log.error("state file %s not written: %s", self.path, clean_text(e, 200))
            else:
                self.written += 1
                log.info("state file %s written: generation %d lineage %s", self.path,
                         state.generation, state.lineage or "-")

    async def flush(self, timeout: float) -> None:
        """Wait (bounded) for the write in progress and any pending one."""
        task = self._task
        if task is not None and not task.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), timeout)
