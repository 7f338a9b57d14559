"""Loading and validating YAML config files; the etcd section shared by daemon and gateway.

A bad file raises ``ConfigError`` naming the file, the field and the reason; the CLI turns it
into exit code 78 before anything touches etcd. ``read_yaml`` is the one loader of every config
file (daemon, gateway, operator; its PyYAML half, ``config/yaml_file.py``, is imported on the
first file read): a regular file of at most ``MAX_CONFIG_BYTES``, UTF-8, no
collection nested deeper than ``MAX_DEPTH``, at most ``MAX_NODES`` values and ``MAX_ALIASES``
alias uses, no key twice in a mapping; anything else is one line naming the file, never a
traceback. A secret file (``etcd.password_file``, a TLS key) that others may read, or its
group unless root shares it with the reader's group, is refused (``secret_mode_problem``).
"""

from __future__ import annotations

import ipaddress
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from awide_cluster.config.errors import ConfigError as ConfigError
from awide_cluster.config.errors import WrongKind as WrongKind

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

M = TypeVar("M", bound=BaseModel)


# Fields only one kind of file has (docs/config.md): a gateway config says ``mode: cluster``
# and names its pod and model; a daemon config lists the cluster's hosts.
_GATEWAY_ONLY = ("mode", "pod", "model", "key_placement", "gateway_id", "nvme")
_DAEMON_ONLY = ("hosts", "role", "dev_cluster", "cards", "api", "sysfs_root", "nvme_program")


def config_kind(data: Any) -> str | None:
    """``"gateway"``, ``"daemon"``, or None when the data is neither clearly (then the
    validation names the field at fault)."""
    if not isinstance(data, dict):
        return None
    gateway = sum(1 for k in _GATEWAY_ONLY if k in data)
    daemon = sum(1 for k in _DAEMON_ONLY if k in data)
    if (data.get("mode") == "cluster" or gateway >= 2) and daemon == 0:
        return "gateway"
    if ("hosts" in data or daemon >= 2) and gateway == 0:
        return "daemon"
    return None


def expect_kind(data: Any, wanted: str, file: str) -> None:
    """Raise ``WrongKind`` when ``data`` is clearly a config of the other kind."""
    found = config_kind(data)
    if found is None or found == wanted:
        return
    hint = {"gateway": f"check it with `awide-cluster gateway check-config {file}`; the "
                       "daemon's is /etc/awide-cluster/cluster.yaml on a storage or witness host",
            "daemon": f"check it with `awide-cluster check-config {file}`; a gateway's has "
                      "mode: cluster, pod and model (docs/config.md)"}[found]
    raise WrongKind(file, found, wanted, hint)


class Section(BaseModel):
    """Base of every config section: unknown keys are errors (typos must not pass)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def secret_mode_problem(mode: int, uid: int, gid: int, *, euid: int,
                        groups: frozenset[int]) -> str | None:
    """Why a secret file of this mode and owner may not be used by a reader of ``euid`` in
    ``groups``, or None. Others may have no permission at all; the group may read only a file
    root owns and shares with a group of the reader's (the ansible role's ``root:awide
    0640``), or when root itself reads it. Pure."""
    perm = stat.S_IMODE(mode)
    if perm & 0o007:
        return f"mode {perm:04o} lets others in: chmod 600 (a secret is its owner's only)"
    if perm & 0o070 and not (uid == 0 and (euid == 0 or gid in groups)):
        return (f"mode {perm:04o} lets its group in: chmod 600, or own it by root with the "
                "daemon's group (root:awide 0640)")
    return None


def check_secret_file(path: Path) -> None:
    """ValueError when ``path`` exists and ``secret_mode_problem`` refuses it; a missing file
    is reported when it is read."""
    try:
        st = path.stat()
    except OSError:
        return
    why = secret_mode_problem(st.st_mode, st.st_uid, st.st_gid, euid=os.geteuid(),
                              groups=frozenset((os.getegid(), *os.getgroups())))
    if why is not None:
        raise ValueError(f"secret file {path}: {why}")


class TlsSection(Section):
    ca_file: Path
    cert_file: Path | None = None
    key_file: Path | None = None

    @model_validator(mode="after")
    def _pair(self) -> TlsSection:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together")
        for p in (self.ca_file, self.cert_file, self.key_file):
            if p is not None and not p.is_file():
                raise ValueError(f"{p} is not a readable file")
        if self.key_file is not None:
            check_secret_file(self.key_file)
        return self


def redact_url(url: str) -> str:
    """``url`` with any user:password part replaced by ``***`` (for error messages and logs)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"***@{host}").geturl()


def is_loopback_host(host: str | None) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1): traffic that never leaves the
    host."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _plain_endpoints(info: ValidationInfo) -> list[tuple[int, str]]:
    """(index, URL) of the ``http://`` endpoints already validated in this section."""
    return [(i, url) for i, url in enumerate(info.data.get("endpoints") or ())
            if urlsplit(url).scheme == "http"]


class EtcdSection(Section):
    endpoints: list[str] = Field(min_length=1, max_length=16)
    call_timeout: float = Field(default=0.5, gt=0.01, le=10.0,
                                description="bound of every etcd call, seconds")
    hedge_after: float = Field(default=0.05, ge=0.0, le=5.0,
                               description="a read not answered by then also goes to the next "
                                           "member")
    tls: TlsSection | None = None
    username: str | None = None
    # SecretStr: the password never shows in a repr, a log line or an error message.
    password: SecretStr | None = None
    password_file: Path | None = None
    allow_plaintext: bool = Field(
        default=False,
        description="LOUD opt-out: accept plain http:// endpoints on other hosts in a "
                    "production cluster (etcd traffic unencrypted on the network)")

    @field_validator("endpoints")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        for i, url in enumerate(v):
            parts = urlsplit(url)
            try:
                port = parts.port
            except ValueError:
                port = None
            if "@" in parts.netloc:     # checked first: never echo a URL with credentials
                raise ValueError(
                    f"endpoint {i} {redact_url(url)!r} carries credentials in the URL: give "
                    "etcd.username and etcd.password_file instead")
            if parts.scheme not in ("http", "https") or not parts.hostname or not port:
                raise ValueError(
                    f"endpoint {i} {redact_url(url)!r} must be http(s)://HOST:PORT "
                    "(e.g. https://10.0.0.1:2379)"
                )
        return v

    @field_validator("tls")
    @classmethod
    def _tls_needs_https(cls, v: TlsSection | None, info: ValidationInfo) -> TlsSection | None:
        plain = _plain_endpoints(info) if v is not None else []
        if plain:
            i, url = plain[0]
            raise ValueError(
                f"TLS settings are given but endpoint {i} {url!r} is plain http: every "
                "endpoint must be https:// (etcd.allow_plaintext does not change this)")
        return v

    @field_validator("password", "password_file")
    @classmethod
    def _password_needs_https(cls, v: Any, info: ValidationInfo) -> Any:
        plain = _plain_endpoints(info) if v is not None else []
        if plain:
            i, url = plain[0]
            raise ValueError(
                f"a password is given but endpoint {i} {url!r} is plain http: the password "
                "would travel in clear; every endpoint must be https:// "
                "(etcd.allow_plaintext does not change this)")
        if isinstance(v, Path):
            check_secret_file(v)
        return v

    @model_validator(mode="after")
    def _auth(self) -> EtcdSection:
        if self.password is not None and self.password_file is not None:
            raise ValueError("give password or password_file, not both")
        if (self.password is not None or self.password_file is not None) and not self.username:
            raise ValueError("a password needs a username")
        if self.hedge_after >= self.call_timeout:
            raise ValueError("hedge_after must be shorter than call_timeout")
        return self

    def plaintext_endpoints(self) -> list[tuple[int, str]]:
        """(index, URL) of the ``http://`` endpoints on another host (not loopback)."""
        out = []
        for i, url in enumerate(self.endpoints):
            parts = urlsplit(url)
            if parts.scheme == "http" and not is_loopback_host(parts.hostname):
                out.append((i, url))
        return out

    def plaintext_warning(self) -> str | None:
        """The loud line to print when ``allow_plaintext`` lets plain http through, else None."""
        plain = self.plaintext_endpoints()
        if not (self.allow_plaintext and plain):
            return None
        urls = ", ".join(url for _, url in plain)
        return (f"WARNING: etcd.allow_plaintext is true: etcd traffic to {urls} is NOT "
                "encrypted (anyone on that network can read and forge the registry)")

    def resolved_password(self) -> str | None:
        if self.password_file is not None:
            return self.password_file.read_text().strip()
        return self.password.get_secret_value() if self.password is not None else None


def plaintext_problems(etcd: EtcdSection, *, dev_cluster: bool | None) -> list[tuple[str, str]]:
    """(field, reason) for each plain ``http://`` endpoint on another host, unless this is a
    development cluster or ``etcd.allow_plaintext`` opts out. Loopback endpoints are fine:
    their traffic never leaves the host. ``dev_cluster`` None: the config has no such field
    (the gateway's)."""
    if dev_cluster or etcd.allow_plaintext:
        return []
    dev = " (a development cluster, dev_cluster: true, accepts it too)" if dev_cluster is not None \
        else ""
    return [(f"etcd.endpoints.{i}", (
        f"{url} is plain http to another host: use https:// with etcd.tls "
        f"(docs/security.md), or opt out loudly with etcd.allow_plaintext: true{dev}"))
        for i, url in etcd.plaintext_endpoints()]


def _field(err: ErrorDetails) -> str:
    return ".".join(str(p) for p in err["loc"]) or "-"


def parse(data: Any, model: type[M], file: str = "<config>") -> M:
    """Validate already-loaded data; ConfigError with every field at fault (the first in
    ``str()``)."""
    if not isinstance(data, dict):
        raise ConfigError(file, "-", "the file must hold a YAML mapping of settings")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError.of(file, [
            (_field(err), err["msg"].removeprefix("Value error, ") + shown_value(err))
            for err in e.errors()]) from None


_SECRET_FIELDS = ("password", "secret", "token")
VALUE_SHOWN_MAX = 60        # characters of a refused value shown in a config error


def shown_value(err: ErrorDetails) -> str:
    """`` (got: VALUE)`` for a refused scalar, so the line says what was written; nothing for
    a missing field, a mapping or a list, or a field that may hold a secret. A URL's user and
    password are redacted; control characters escaped; long values cut."""
    if err["type"] == "missing" or "input" not in err:
        return ""
    value = err["input"]
    if any(s in str(part).lower() for part in err["loc"] for s in _SECRET_FIELDS):
        return ""
    if isinstance(value, bool) or isinstance(value, (int, float)):
        return f" (got: {value!r})"
    if not isinstance(value, str):
        return ""
    if "@" in value and "://" in value:
        value = redact_url(value)
    text = repr(value)
    if len(text) > VALUE_SHOWN_MAX:
        text = text[:VALUE_SHOWN_MAX - 4] + "...'"
    return f" (got: {text})"


MAX_CONFIG_BYTES = 1024 * 1024
MAX_DEPTH = 20
MAX_ALIASES = 64
MAX_NODES = 10_000      # a host of 64 cards is about 2,000


def _read_bounded(name: str) -> bytes:
    """The bytes of a regular file of at most ``MAX_CONFIG_BYTES`` (never blocks on a FIFO,
    never reads more than the bound plus one byte)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise ConfigError(name, "-", f"cannot read the file: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(name, "-", "not a regular file")
        if st.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(name, "-", f"{st.st_size} bytes, over the bound of "
                                         f"{MAX_CONFIG_BYTES} (1 MiB) for a config file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ConfigError(name, "-", f"cannot read the file: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(name, "-", f"over the bound of {MAX_CONFIG_BYTES} bytes (1 MiB) for "
                                     "a config file")
    return data


def read_yaml(path: str | Path) -> Any:
    """The data of a YAML config file within the loader's limits (module doc); ConfigError
    naming the file (and the line) when it is unreadable, too large, not UTF-8, not YAML, too
    deep or holds a key twice."""
    name = str(path)
    raw = _read_bounded(name)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ConfigError(name, f"line {line}", f"not UTF-8 text (byte 0x{raw[e.start]:02x} "
                                                f"at offset {e.start})") from None
    from awide_cluster.config.yaml_file import parse_text
    return parse_text(name, text)


def load(path: str | Path, model: type[M]) -> M:
    """Read a YAML file and validate it against ``model``."""
    return parse(read_yaml(path), model, str(path))
