"""DH-HMAC-CHAP host secrets (NVMe-oF in-band authentication), read from a private file.

A secret is nvme-cli's transport form ``DHHC-1:<hh>:<base64 of key + CRC-32>:`` (``hh``: 00 no
transformation, 01 SHA-256, 02 SHA-384, 03 SHA-512; keys of 32, 48 or 64 bytes), as made by
``nvme gen-dhchap-key``. The file holds that one line and must be a regular file owned by the
reader (or root) with no permission for group or others. Errors name the file and what is
wrong, never its content; a ``DhchapSecret`` shows as ``***`` in repr and str.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import stat
import uuid
import zlib
from pathlib import Path

MAX_FILE_BYTES = 512
_FORM = re.compile(r"DHHC-1:(?P<hash>0[0-3]):(?P<b64>[A-Za-z0-9+/]{40,100}={0,2}):")
_KEY_BYTES = (32, 48, 64)


class BadSecret(ValueError):
    """A secret file that cannot be used; the message names the file, never the secret."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"DH-HMAC-CHAP secret file {self.path}: {reason}")


class DhchapSecret:
    """A validated secret; its value is only read by whoever passes it on (``reveal``)."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "DhchapSecret(***)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DhchapSecret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def parse_secret(text: str, path: str | os.PathLike[str] = "<secret>") -> DhchapSecret:
    """Check the ``DHHC-1:hh:base64:`` form, the key length and its CRC-32."""
    m = _FORM.fullmatch(text)
    if m is None:
        raise BadSecret(path, "not a DHHC-1:NN:<base64>: secret (nvme gen-dhchap-key makes one)")
    try:
        raw = base64.b64decode(m["b64"], validate=True)
    except (binascii.Error, ValueError):
        raise BadSecret(path, "the key is not valid base64") from None
    key, crc = raw[:-4], raw[-4:]
    if len(key) not in _KEY_BYTES:
        raise BadSecret(path, f"a key of {len(key)} bytes (32, 48 or 64 needed)")
    if zlib.crc32(key).to_bytes(4, "little") != crc:
        raise BadSecret(path, "the key's CRC-32 does not match (damaged or mistyped)")
    return DhchapSecret(text)


def read_secret_file(path: str | os.PathLike[str]) -> DhchapSecret:
    """Read and check a secret file (see the module doc); raise BadSecret."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise BadSecret(p, "does not exist") from None
    except OSError as e:
        raise BadSecret(p, f"cannot be opened ({e.strerror or e}; a symlink is refused)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadSecret(p, "is not a regular file")
        if st.st_mode & 0o077:
            raise BadSecret(p, f"mode {stat.S_IMODE(st.st_mode):04o} lets group or others in "
                               "(chmod 0600)")
        if st.st_uid not in (os.geteuid(), 0):
            raise BadSecret(p, f"owned by uid {st.st_uid}, neither this user nor root")
        data = os.read(fd, MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise BadSecret(p, f"longer than {MAX_FILE_BYTES} bytes")
    try:
        text = data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise BadSecret(p, "not ASCII text") from None
    if not text:
        raise BadSecret(p, "is empty")
    return parse_secret(text, p)


DEFAULT_HOSTID_FILE = "/etc/nvme/hostid"    # nvme-cli's own default host ID
_HOSTID_BYTES = 256


def read_hostid(path: str | os.PathLike[str]) -> str:
    """This host's NVMe host ID from ``path`` (one UUID, as nvme-cli writes /etc/nvme/hostid),
    normalised; raise ValueError saying what is wrong (no secret here: the ID is public)."""
    p = Path(path)
    if not p.is_absolute():
        raise ValueError(f"{p} is not an absolute path")
    try:
        with open(p, "rb") as f:
            raw = f.read(_HOSTID_BYTES + 1)
    except FileNotFoundError:
        raise ValueError(f"{p} does not exist") from None
    except OSError as e:
        raise ValueError(f"{p} cannot be read ({e.strerror or e})") from None
    if len(raw) > _HOSTID_BYTES:
        raise ValueError(f"{p} is longer than a host ID")
    try:
        return str(uuid.UUID(raw.decode("ascii").strip()))
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"{p} does not hold a UUID") from None
