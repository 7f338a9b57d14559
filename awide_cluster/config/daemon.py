"""The daemon's config file (``awide-cluster run --config FILE``), see docs/config.md.

    cluster: prod1
    host: store-a                 # default: this machine's host name
    hosts: [store-a, store-b, witness-c]   # every host of the cluster (storage and witness)
    role: storage                 # storage | witness (a witness has no cards)
    dev_cluster: false            # true: accept an etcd cluster of fewer than 3 members
    etcd:
      endpoints: [https://10.0.0.1:2379, https://10.0.0.2:2379, https://10.0.0.3:2379]
      tls: {ca_file: /etc/awide/ca.pem}   # http:// to other hosts: see docs/security.md
    timing: {poll_interval: 1.0, lease_ttl: 5, sick_polls: 3, healthy_polls: 1,
             etcd_progress_notify: 1.4}   # seconds, as the etcd members' flag
    api: {listen: 127.0.0.1:9700}
    cards:
      - {name: card0, kind: nvme, serial: SN1, target: {...}, store: {systemd_unit: ...}}
    sysfs_root: /sys
    nvme_program: nvme
    addresses: {store-a: [10.0.0.1], store-b: [10.0.0.2]}   # allowed target addresses

``load`` raises ``ConfigError(file, field, reason)`` for the first problem: a field that does
not validate, or a combination that cannot work (a lease that expires between two polls, two
cards with one name, a witness with cards).
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from awide_cluster.cards.spec import CardSpec
from awide_cluster.config import common
from awide_cluster.config.common import ConfigError, EtcdSection, Section, plaintext_problems
from awide_cluster.config.listen import ListenError, parse_listen
from awide_cluster.contract.keys import BadName, check_name
from awide_cluster.contract.report import RESTART_GRACE_MAX
from awide_cluster.contract.vouch import Allowed, parse_networks

DEFAULT_LISTEN = "127.0.0.1:9700"
# a daemon watch is never re-opened after less silence than this (seconds)
WATCH_STALL_FLOOR = 3.0
# the leader's members/ watch, fed by every host's report each poll, is re-opened after this
# many silent polls (or progress notifications, the shorter), never under the floor (seconds):
# it must leave a frozen member before a sick card's decisive report is due, (sick_polls - 1)
# polls after the fault at the earliest, or that report waits for the leader's next poll cycle
REPORTS_WATCH_SILENT_POLLS = 1.5
REPORTS_WATCH_STALL_FLOOR = 1.0
# the etcd members' --experimental-watch-progress-notify-interval at the deploy's default
# (seconds; the ansible role's awide_etcd_progress_notify, the test harness's members): under a
# gateway's proof window (1.5 polls of 1 s, docs/gateway.md "Cost to etcd"), so a notification
# stands in for every serializable poll, with 0.1 s for its delivery; not shorter, since each
# one costs etcd per watch (docs/decisions.md, "The members' progress notifications")
ETCD_PROGRESS_NOTIFY = 1.4


class TimingSection(Section):
    poll_interval: float = Field(default=1.0, ge=0.05, le=60.0,
                                 description="seconds between two polls (report, leader cycle)")
    lease_ttl: int = Field(default=5, ge=1, le=600,
                           description="seconds a host's lease (report, leadership) outlives "
                                       "its last keepalive")
    sick_polls: int = Field(default=3, ge=1, le=100,
                            description="bad observations in a row that take a card out")
    healthy_polls: int = Field(default=1, ge=1, le=100,
                               description="good observations in a row that put it back in")
    restart_grace: int = Field(
        default=120, ge=0, le=RESTART_GRACE_MAX,
        description="seconds a cleanly stopped daemon's host stays marked restarting (its "
                    "cards held in service, not observed) before its absence counts as a "
                    "failure; 0: none (the report vanishes at once on a clean stop)")
    etcd_progress_notify: float = Field(
        default=ETCD_PROGRESS_NOTIFY, ge=0.1, le=600.0,
        description="seconds between the etcd members' watch progress notifications (their "
                    "--experimental-watch-progress-notify-interval, the same value): the idle "
                    "leader-key watch is re-opened after max(3, 3 x this) s of silence")

    @property
    def leader_watch_stall(self) -> float:
        """Seconds of silence after which the leader-key watch is re-opened on another
        member. The key is idle but for progress notifications: three of them missed."""
        return max(WATCH_STALL_FLOOR, 3 * self.etcd_progress_notify)

    @property
    def reports_watch_stall(self) -> float:
        """The same for the leader's ``members/`` watch. Every host writes its report each
        poll (the leader's own too), so it is never idle longer than a poll or a progress
        notification, whichever comes first: 1.5 of those silent (1.5 s at the default), so
        a watch on a frozen member moves before a sick card's decisive report is due."""
        return max(REPORTS_WATCH_STALL_FLOOR,
                   REPORTS_WATCH_SILENT_POLLS * min(self.poll_interval,
                                                    self.etcd_progress_notify))


class DampingSection(Section):
    """Flap damping (docs/config.md): a card that went out ``outs`` times within ``window`` s
    is held out when it next returns, ``first_hold`` s, each next hold twice the last, at most
    ``max_hold`` s."""

    outs: int = Field(default=3, ge=0, le=100,
                      description="outs within the window whose next return is held; 0: no "
                                  "damping")
    window: float = Field(default=600.0, ge=1.0, le=86400.0,
                          description="seconds over which outs are counted (and without an "
                                      "out after a hold, its level is forgotten)")
    first_hold: float = Field(default=10.0, ge=0.05, le=3600.0,
                              description="seconds of the first hold")
    max_hold: float = Field(default=300.0, ge=0.05, le=3600.0,
                            description="seconds a hold lasts at most")


class ApiTlsSection(Section):
    """TLS of the daemon's HTTP API; every client presents a certificate of ``client_ca_file``."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path

    @field_validator("cert_file", "key_file", "client_ca_file")
    @classmethod
    def _readable(cls, v: Path, info: ValidationInfo) -> Path:
        if not v.is_file():
            raise ValueError(f"{v} is not a readable file")
        if info.field_name == "key_file":
            common.check_secret_file(v)
        return v


class ApiSection(Section):
    listen: str = Field(default=DEFAULT_LISTEN, description="HOST:PORT of the daemon's HTTP API")
    tls: ApiTlsSection | None = None
    allow_insecure: bool = Field(
        default=False,
        description="LOUD opt-out: serve the API in plain HTTP, without client certificates, "
                    "on an address that is not loopback")

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        try:
            parse_listen(v)
        except ListenError as e:
            raise ValueError(str(e)) from None
        return v


def _hostname() -> str:
    return socket.gethostname().split(".")[0]


class DaemonConfig(Section):
    cluster: str
    host: str = Field(default_factory=_hostname)
    role: Literal["storage", "witness"] = "storage"
    dev_cluster: bool = False
    # every host of the cluster, storage and witness: the leader admits reports (and so cards)
    # only from these; a report under members/<other> is refused and shown as a problem
    hosts: tuple[str, ...] = Field(min_length=1, max_length=256)
    etcd: EtcdSection
    timing: TimingSection = TimingSection()
    damping: DampingSection = DampingSection()
    api: ApiSection = ApiSection()
    cards: tuple[CardSpec, ...] = ()
    sysfs_root: Path = Path("/sys")
    nvme_program: str = Field(default="nvme", min_length=1, max_length=4096)
    # each storage host's allowed NVMe-oF target addresses (addresses or CIDR networks), from
    # the inventory: the leader does not follow a card reported outside them (the gateways'
    # ``hosts``); absent: not checked
    addresses: dict[str, list[str]] | None = Field(default=None, max_length=256)

    @field_validator("addresses")
    @classmethod
    def _addresses(cls, v: dict[str, list[str]] | None) -> dict[str, list[str]] | None:
        if v is None:
            return v
        for host, nets in v.items():
            try:
                check_name("host", host)
            except BadName as e:
                raise ValueError(str(e)) from None
            if not 1 <= len(nets) <= 64:
                raise ValueError(f"host {host}: 1 to 64 addresses or networks")
            parse_networks(nets)
        return v

    def allowed(self) -> Allowed | None:
        """``addresses`` as networks (None: not given)."""
        if self.addresses is None:
            return None
        return {h: parse_networks(nets) for h, nets in self.addresses.items()}

    @field_validator("cluster", "host")
    @classmethod
    def _name(cls, v: str, info: Any) -> str:
        try:
            return check_name(info.field_name, v)
        except BadName as e:
            raise ValueError(str(e)) from None

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for h in v:
            try:
                check_name("host", h)
            except BadName as e:
                raise ValueError(str(e)) from None
        if len(set(v)) != len(v):
            raise ValueError("a host is listed twice")
        return v

    @field_validator("sysfs_root")
    @classmethod
    def _abs(cls, v: Path) -> Path:
        if not v.is_absolute():
            raise ValueError("must be an absolute path")
        return v

    @property
    def prefix(self) -> str:
        from awide_cluster.contract.keys import prefix
        return prefix(self.cluster)


def combination_problems(cfg: DaemonConfig) -> list[tuple[str, str]]:
    """(field, reason) of every combination that cannot work; empty when the config is sound."""
    out: list[tuple[str, str]] = []
    t, call = cfg.timing, cfg.etcd.call_timeout
    floor = t.poll_interval + 2 * call
    if not t.lease_ttl > floor:
        out.append(("timing.lease_ttl", (
            f"{t.lease_ttl} s is not longer than poll_interval + 2 x etcd.call_timeout "
            f"= {t.poll_interval:g} + 2 x {call:g} = {floor:g} s: the lease could expire "
            "between two keepalives of a healthy daemon")))
    if cfg.host not in cfg.hosts:
        out.append(("hosts", f"this host {cfg.host!r} is not in hosts "
                             f"({', '.join(cfg.hosts)}): its own reports would be refused"))
    out += plaintext_problems(cfg.etcd, dev_cluster=cfg.dev_cluster)
    out += api_problems(cfg.api)
    from awide_cluster.access.plan import host_user, identity_problem
    why = identity_problem(cfg.etcd.username, cfg.cluster, (host_user(cfg.cluster, cfg.host),),
                           "this daemon")
    if why:
        out.append(("etcd.username", why))
    if cfg.role == "witness" and cfg.cards:
        out.append(("cards", "a witness host has no cards (role: witness)"))
    seen: dict[str, int] = {}
    paths: dict[str, int] = {}
    serials: dict[str, int] = {}
    for i, c in enumerate(cfg.cards):
        if c.name in seen:
            out.append((f"cards.{i}.name",
                        f"card name {c.name!r} already used by cards.{seen[c.name]}"))
        seen.setdefault(c.name, i)
        if c.path is not None:
            p = str(c.path)
            if p in paths:
                out.append((f"cards.{i}.path", f"path {p} already used by cards.{paths[p]}"))
            paths.setdefault(p, i)
        if c.serial is not None:
            if c.serial in serials:
                out.append((f"cards.{i}.serial",
                            f"serial {c.serial} already used by cards.{serials[c.serial]}"))
            serials.setdefault(c.serial, i)
        window = t.sick_polls * t.poll_interval
        if not c.probe_timeout < window:
            out.append((f"cards.{i}.probe_timeout", (
                f"{c.probe_timeout:g} s is not shorter than sick_polls x poll_interval = "
                f"{window:g} s: a hanging probe would stall this host's reports until the "
                "leader takes every card of the host out")))
    if cfg.damping.max_hold < cfg.damping.first_hold:
        out.append(("damping.max_hold", f"{cfg.damping.max_hold:g} s is shorter than "
                                        f"damping.first_hold ({cfg.damping.first_hold:g} s)"))
    if len(cfg.cards) > 64:
        out.append(("cards", "at most 64 cards per host"))
    return out


def api_problems(api: ApiSection) -> list[tuple[str, str]]:
    """An API bound off loopback needs TLS with client certificates (``api.tls``), unless
    ``api.allow_insecure`` opts out."""
    host, _ = parse_listen(api.listen)
    if api.tls is not None or api.allow_insecure or common.is_loopback_host(host):
        return []
    return [("api.tls", f"api.listen {api.listen} is not loopback: give api.tls (cert_file, "
                        "key_file, client_ca_file: clients must present a certificate), or opt "
                        "out loudly with api.allow_insecure: true (docs/security.md)")]


def parse(data: Any, file: str = "<config>") -> DaemonConfig:
    common.expect_kind(data, "daemon", file)        # a gateway's file: said in one line
    cfg = common.parse(data, DaemonConfig, file)
    problems = combination_problems(cfg)
    if problems:
        raise ConfigError.of(file, problems)
    return cfg


def load(path: str | Path) -> DaemonConfig:
    """Read and check a daemon config file; ConfigError(file, field, reason) when it is bad
    (``WrongKind`` when it is a gateway's)."""
    return parse(common.read_yaml(path), str(path))


RESTART_FIELDS = ("cluster", "host", "role", "dev_cluster", "etcd", "api")


def reload_problems(old: DaemonConfig, new: DaemonConfig) -> list[str]:
    """Fields a reload (SIGHUP) cannot change: they need a restart."""
    return [f for f in RESTART_FIELDS if getattr(old, f) != getattr(new, f)]
