"""Directory cards (dev, test, small sites): a directory carrying a label file.

The label ``<dir>/.awide-card.json`` is ``{"awide_card_label": 1, "serial": …, "model": …,
"uuid": …}``. The directory that comes back under the configured path with the same label is
the same card; a different label, or none (e.g. other storage mounted there, or nothing
mounted), is not. The identity is ``label:<uuid>``.

Everything here is synchronous file I/O; async callers run it off the event loop on the probe
worker, bounded (``observe`` does, ``cards.worker``).
"""

from __future__ import annotations

import errno
import json
import os
import uuid as uuidlib
from dataclasses import dataclass
from pathlib import Path

from awide_cluster.cards.model import LocalCard
from awide_cluster.contract.target import InvalidTarget, NvmeTarget, clean_model, clean_serial

LABEL_FILE = ".awide-card.json"
LABEL_VERSION = 1
_READ_CAP = 64 * 1024


class LabelError(Exception):
    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class LabelMissing(LabelError):
    """The directory does not exist, or holds no label."""


class LabelCorrupt(LabelError):
    """The label exists but is not a valid label."""


class LabelExists(LabelError):
    """write_label refused to overwrite an existing label (use force=True on purpose)."""


@dataclass(frozen=True, slots=True)
class CardLabel:
    serial: str
    model: str
    uuid: str

    @property
    def identity(self) -> str:
        return f"label:{self.uuid}"

    def to_dict(self) -> dict[str, object]:
        return {"awide_card_label": LABEL_VERSION, "serial": self.serial,
                "model": self.model, "uuid": self.uuid}


def same_card(first: CardLabel, now: CardLabel | None) -> bool:
    """Pure: the directory is the same card only when it carries the very same label."""
    return now is not None and now == first


def _validated(path: Path, serial: object, model: object, uuid: object) -> CardLabel:
    try:
        s, m = clean_serial(serial), clean_model(model)
    except InvalidTarget as exc:
        raise LabelCorrupt(path, f"label {exc.field}: {exc.reason}") from None
    if not isinstance(uuid, str):
        raise LabelCorrupt(path, "label uuid: not a string")
    try:
        u = str(uuidlib.UUID(uuid))
    except ValueError:
        raise LabelCorrupt(path, f"label uuid: {uuid[:60]!r} is not a UUID") from None
    return CardLabel(serial=s, model=m, uuid=u)


def read_label(path: Path | str) -> CardLabel:
    """Read and check ``<path>/.awide-card.json``; LabelMissing / LabelCorrupt otherwise."""
    label = os.path.join(path, LABEL_FILE)
    try:
        data = _read_capped(label)
    except FileNotFoundError:
        what = "no label" if os.path.isdir(path) else "directory does not exist"
        raise LabelMissing(Path(path), f"{what} ({LABEL_FILE})") from None
    except NotADirectoryError:
        raise LabelMissing(Path(path), "not a directory") from None
    except OSError as exc:
        raise LabelMissing(Path(path), f"label unreadable: {exc.strerror or exc}") from None
    if len(data) > _READ_CAP:
        raise LabelCorrupt(Path(path), f"label larger than {_READ_CAP} bytes")
    known = _parsed.get(label)
    if known is not None and known[0] == data:
        return known[1]         # the same bytes as last time: the same label (pure)
    got = _parse_label(Path(path), data)
    if len(_parsed) >= _PARSED_MAX:
        _parsed.clear()
    _parsed[label] = (data, got)
    return got


# the last label read from each label file and what it parsed to: a label that did not change
# since the last probe is not parsed again (the same bytes always give the same label); at
# most _PARSED_MAX files remembered (a gateway's cards come from the registry)
_parsed: dict[str, tuple[bytes, CardLabel]] = {}
_PARSED_MAX = 256


def _read_capped(name: str) -> bytes:
    """At most ``_READ_CAP + 1`` bytes of the file ``name`` (open, reads, close: no buffered
    file object and its system calls). Raises OSError."""
    fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks: list[bytes] = []
        got = 0
        while got <= _READ_CAP:
            chunk = os.read(fd, _READ_CAP + 1 - got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def _parse_label(directory: Path, data: bytes) -> CardLabel:
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise LabelCorrupt(directory, f"label is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("awide_card_label") != LABEL_VERSION:
        raise LabelCorrupt(directory, f"not an awide card label version {LABEL_VERSION}")
    unknown = set(doc) - {"awide_card_label", "serial", "model", "uuid"}
    if unknown:
        raise LabelCorrupt(directory, f"unknown label fields {sorted(unknown)}")
    return _validated(directory, doc.get("serial"), doc.get("model"), doc.get("uuid"))


def write_label(path: Path | str, serial: str, model: str, uuid: str | None = None, *,
                force: bool = False) -> CardLabel:
    """Create the label of a new directory card (atomically; fsynced).

    Refuses (LabelExists) when a label is already there, unless ``force``: labelling a
    directory again makes it a different card.
    """
    directory = Path(path)
    if not directory.is_dir():
        raise LabelMissing(directory, "directory does not exist")
    label = _validated(directory, serial, model, uuid or str(uuidlib.uuid4()))
    final = directory / LABEL_FILE
    tmp = directory / f".awide-card.{os.getpid()}.{uuidlib.uuid4().hex[:8]}.tmp"
    payload = (json.dumps(label.to_dict(), indent=1) + "\n").encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            os.write(fd, payload)
            os.fsync(fd)
        finally:
            os.close(fd)
        if force:
            os.replace(tmp, final)
        else:
            try:
                os.link(tmp, final)
            except FileExistsError:
                raise LabelExists(directory,
                                  "already labelled; pass force=True to relabel") from None
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
    _fsync_dir(directory)
    return label


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:  # pragma: no cover - some file systems refuse
        if exc.errno not in (errno.EINVAL, errno.EROFS):
            raise
    finally:
        os.close(fd)


def discover_dir(name: str, path: Path | str, target: NvmeTarget | None = None) -> LocalCard:
    """The LocalCard of a directory card (raises LabelMissing / LabelCorrupt)."""
    label = read_label(path)
    return LocalCard(name=name, kind="dir", serial=label.serial, model=label.model,
                     identity=label.identity, device=str(path), controller_state=None,
                     target=target)
