"""The gateway's cluster-mode configuration (YAML), validated like the daemon's.

Example (every field but ``mode``, ``cluster``, ``host``, ``pod``, ``etcd.endpoints`` and
``model.name`` has a default; see docs/config.md, section "Gateway")::

    mode: cluster
    cluster: c1
    host: gpu7
    pod: vllm-0
    etcd:
      endpoints: [https://10.0.0.1:2379, https://10.0.0.2:2379, https://10.0.0.3:2379]
      tls: {ca_file: /etc/awide/ca.pem}   # http:// to other hosts: see docs/security.md
    timing: {poll_interval: 1.0, sick_polls: 3, healthy_polls: 1, lease_ttl: 30,
             linearizable_every: 10}
    key_placement: dialog
    model: {name: meta-llama/Llama-3.1-8B-Instruct, revision: main, dtype: bfloat16,
            block_tokens: 16, num_layers: 32, num_kv_heads: 8, head_dim: 128}
    nvme: {program: nvme, sysfs_root: /sys, command_timeout: 5.0,
           hostnqn: "nqn.2024-01.io.awide:gpu7",             # listed in the cards' allow-lists
           dhchap_secret_file: /etc/awide/gpu7.dhchap,       # optional, mode 0600
           dhchap_ctrl_secret_file: /etc/awide/gpu7.ctrl,    # optional: the target proves it
           hostid_file: /etc/nvme/hostid}     # with a secret and no hostid: this host's ID
    watch: true
    watch_stall_after: 30.0
    hosts: {s1: [10.0.0.1], s2: [10.0.0.2, "fd00:2::/64"]}   # allowed target addresses

Combinations that cannot work are refused when the file is loaded (exit code 78 from
``awide-cluster gateway check-config``), never discovered at run time.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from awide_cluster.access.plan import gateway_user, identity_problem
from awide_cluster.config.common import (
    ConfigError,
    EtcdSection,
    Section,
    expect_kind,
    parse,
    plaintext_problems,
    read_yaml,
)
from awide_cluster.contract.keys import BadName, check_name
from awide_cluster.contract.target import InvalidTarget, validate_nqn
from awide_cluster.contract.vouch import Allowed, parse_networks
from awide_cluster.nvme.dhchap import (
    DEFAULT_HOSTID_FILE,
    BadSecret,
    read_hostid,
    read_secret_file,
)

__all__ = [
    "ConfigError", "FabricTimeouts", "GatewayConfig", "ModelSection", "NvmeSection",
    "StateSection", "TimingSection", "load_config", "parse_config",
]

_DTYPES = ("float16", "bfloat16", "float32", "fp8_e4m3", "fp8_e5m2", "int8")
HOSTS_MAX = 1024            # hosts in ``hosts``
HOST_NETWORKS_MAX = 64      # addresses or networks per host
_EXTRA_KEY = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


def _name(what: str, v: str) -> str:
    try:
        return check_name(what, v)
    except BadName as e:
        raise ValueError(str(e)) from None


class TimingSection(Section):
    # a dump (model_dump, model_dump_json) writes ``lease_ttl``, the key a file takes back
    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True)

    poll_interval: float = Field(default=1.0, ge=0.05, le=60.0,
                                 description="seconds between two registry polls")
    sick_polls: int = Field(default=3, ge=1, le=100,
                            description="bad local observations in a row before a card goes out")
    healthy_polls: int = Field(default=1, ge=1, le=100,
                               description="good observations in a row before it comes back")
    # ``lease_ttl`` in the file (the key users write); ``registration_ttl`` in the code, so
    # that ``lease_ttl`` means the daemon's host lease only
    registration_ttl: int = Field(default=30, ge=2, le=600, alias="lease_ttl",
                                  description="TTL (s) of the lease gateways/<id> is bound to")
    linearizable_every: int = Field(
        default=10, ge=1, le=3600,
        description="every Nth registry poll is linearizable, the others serializable "
                    "(1 = all linearizable); bounds what a lagging member can hide")
    etcd_progress_notify: float = Field(
        default=1.4, ge=0.1, le=600.0,
        description="the etcd members' --experimental-watch-progress-notify-interval "
                    "(seconds): the proof window never ends before the next notification is "
                    "due, and a registry watch silent for it moves to another member")


class ModelSection(Section):
    """The inputs of the key namespace: everything that changes the bytes of a KV block.

    Two configurations that differ in any field get different namespaces, so their keys never
    meet. ``extra`` carries engine-specific inputs (e.g. ``tensor_parallel: "2"``).
    """

    name: str = Field(min_length=1, max_length=200)
    revision: str = Field(default="main", min_length=1, max_length=100)
    dtype: str = "bfloat16"
    block_tokens: int = Field(default=16, ge=1, le=65536)
    num_layers: int = Field(default=0, ge=0, le=4096, description="0 = not given")
    num_kv_heads: int = Field(default=0, ge=0, le=4096, description="0 = not given")
    head_dim: int = Field(default=0, ge=0, le=65536, description="0 = not given")
    extra: dict[str, str] = Field(default_factory=dict, max_length=32)

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v: str) -> str:
        if v not in _DTYPES:
            raise ValueError(f"dtype {v!r} is not one of {', '.join(_DTYPES)}")
        return v

    @field_validator("extra")
    @classmethod
    def _extra(cls, v: dict[str, str]) -> dict[str, str]:
        for k in v:
            if not _EXTRA_KEY.match(k):
                raise ValueError(f"extra key {k!r}: lower-case letters, digits and '_' only")
        return v


@dataclass(frozen=True, slots=True)
class FabricTimeouts:
    """The NVMe-oF timeouts of every ``nvme connect`` (seconds; docs/config.md, "NVMe-oF
    timeouts")."""
    ctrl_loss_tmo: int
    reconnect_delay: int
    fast_io_fail_tmo: int
    keep_alive_tmo: int


class NvmeSection(Section):
    program: str = Field(default="nvme", min_length=1, description="nvme-cli, looked up on PATH")
    sysfs_root: Path = Path("/sys")
    hostnqn: str | None = Field(
        default=None,
        description="this host's NQN, passed to nvme connect (default: nvme-cli's "
                    "/etc/nvme/hostnqn); the cards' exports allow only listed host NQNs")
    dhchap_secret_file: Path | None = Field(
        default=None,
        description="DH-HMAC-CHAP secret of hostnqn (DHHC-1:...), a file of mode 0600 read "
                    "at each connect; needs hostnqn")
    dhchap_ctrl_secret_file: Path | None = Field(
        default=None,
        description="DH-HMAC-CHAP controller secret (DHHC-1:...): the card's target must "
                    "prove it holds it (bidirectional authentication); a file of mode 0600 "
                    "read at each connect; needs dhchap_secret_file")
    hostid: str | None = Field(
        default=None,
        description="this host's NVMe host ID (a UUID); with a DH-HMAC-CHAP secret and none "
                    "given, read from hostid_file. The secrets reach nvme-cli in a 0600 JSON "
                    "file (--config), never on its command line")
    hostid_file: Path = Field(
        default=Path(DEFAULT_HOSTID_FILE),
        description="where this host's NVMe host ID is read when a DH-HMAC-CHAP secret is "
                    "set and hostid is not (nvme-cli's own default)")
    command_timeout: float = Field(default=5.0, gt=0.0, le=120.0,
                                   description="bound of every nvme-cli command, seconds")
    disconnect_forgotten: bool = Field(
        default=True,
        description="disconnect a card the registry no longer lists (never one merely out)")
    ctrl_loss_tmo: int = Field(
        default=60, ge=2, le=3600,
        description="nvme connect --ctrl-loss-tmo: the kernel removes a controller whose "
                    "target stayed unreachable this long (s)")
    reconnect_delay: int = Field(
        default=1, ge=1, le=60,
        description="nvme connect --reconnect-delay: seconds between reconnect attempts")
    fast_io_fail_tmo: int = Field(
        default=1, ge=0, le=600,
        description="I/O to a controller that lost its target fails after this (s), set "
                    "through sysfs right after the connect (nvme-cli 2.3 has no option)")
    keep_alive_tmo: int = Field(
        default=2, ge=1, le=60,
        description="nvme connect --keep-alive-tmo: a silent target is noticed within it (s)")
    discovery: bool = Field(
        default=False,
        description="before each nvme connect, read the discovery log of the NVMe-oF "
                    "discovery controller at the card's vouched address and connect only when "
                    "it publishes the card's subsystem at that very address and port; nothing "
                    "is taken from it (the registry stays the authority)")
    discovery_port: int | None = Field(
        default=None, ge=1, le=65535,
        description="port of that discovery controller; none: the card's own port (a Linux "
                    "nvmet port answers discovery too), 8009 for a dedicated one")

    @field_validator("hostid")
    @classmethod
    def _hostid(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            return str(uuid.UUID(v))
        except ValueError:
            raise ValueError(f"{v!r} is not a UUID") from None

    @field_validator("hostnqn")
    @classmethod
    def _hostnqn(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            return validate_nqn(v, "hostnqn")
        except InvalidTarget as e:
            raise ValueError(str(e)) from None

    @field_validator("dhchap_secret_file", "dhchap_ctrl_secret_file")
    @classmethod
    def _secret_file(cls, v: Path | None) -> Path | None:
        """Checked when the config is loaded (read again at each connect, never kept)."""
        if v is None:
            return v
        if not v.is_absolute():
            raise ValueError(f"{v} is not an absolute path")
        try:
            read_secret_file(v)
        except BadSecret as e:
            raise ValueError(str(e)) from None
        return v

    @model_validator(mode="after")
    def _timeouts_fit(self) -> NvmeSection:
        if self.fast_io_fail_tmo >= self.ctrl_loss_tmo:
            raise ValueError(f"fast_io_fail_tmo ({self.fast_io_fail_tmo} s) must be shorter "
                             f"than ctrl_loss_tmo ({self.ctrl_loss_tmo} s): I/O would wait "
                             "until the controller is removed")
        if self.reconnect_delay >= self.ctrl_loss_tmo:
            raise ValueError(f"reconnect_delay ({self.reconnect_delay} s) must be shorter "
                             f"than ctrl_loss_tmo ({self.ctrl_loss_tmo} s): no reconnect "
                             "would be tried")
        return self

    @property
    def fabric_timeouts(self) -> FabricTimeouts:
        return FabricTimeouts(self.ctrl_loss_tmo, self.reconnect_delay, self.fast_io_fail_tmo,
                              self.keep_alive_tmo)

    @model_validator(mode="after")
    def _secret_needs_host(self) -> NvmeSection:
        if self.dhchap_secret_file is not None and self.hostnqn is None:
            raise ValueError("dhchap_secret_file needs hostnqn: the cards hold one "
                             "DH-HMAC-CHAP key per host NQN")
        if self.dhchap_ctrl_secret_file is not None and self.dhchap_secret_file is None:
            raise ValueError("dhchap_ctrl_secret_file needs dhchap_secret_file: the "
                             "controller authenticates only within the host's exchange")
        if self.dhchap_secret_file is not None and self.hostid is None:
            # the secrets go to nvme-cli only in a file, which it reads only for a connect
            # with --hostid: never on its command line (docs/security.md, "NVMe-oF access")
            try:
                found = read_hostid(self.hostid_file)
            except ValueError as e:
                raise ValueError(
                    "dhchap_secret_file needs this host's NVMe host ID (the secrets reach "
                    "nvme-cli in a file only with it, never on its command line): set "
                    f"nvme.hostid to a UUID or write one to {self.hostid_file} "
                    f"(nvme.hostid_file): {e}") from None
            object.__setattr__(self, "hostid", found)     # frozen: set once, here
        return self


class StateSection(Section):
    """The state file: the last registry this gateway accepted, served at a start while etcd
    does not answer (docs/gateway.md, "Starting in an etcd outage")."""

    dir: Path | None = Field(
        default=None,
        description="directory of the state file <gateway id>.state.json (created 0700 if "
                    "missing); none: no state file")
    max_age: float = Field(default=86400.0, gt=0.0, le=30 * 86400.0,
                           description="a state file older than this (s) is never served")

    @field_validator("dir")
    @classmethod
    def _absolute(cls, v: Path | None) -> Path | None:
        if v is not None and not v.is_absolute():
            raise ValueError(f"{v} is not an absolute path")
        return v


class GatewayConfig(Section):
    mode: Literal["cluster"]
    cluster: str
    host: str
    pod: str
    gateway_id: str | None = Field(default=None, description="default: <host>-<pod>")
    etcd: EtcdSection
    timing: TimingSection = TimingSection()
    key_placement: Literal["dialog", "stripe"] = "dialog"
    model: ModelSection
    nvme: NvmeSection = NvmeSection()
    watch: bool = Field(default=True, description="also watch the registry (the poll stays)")
    watch_stall_after: float = Field(
        default=30.0, ge=2.0, le=3600.0,
        description="a registry watch silent this long (no event, no progress notification) "
                    "is re-opened on another member at the latest (at once when the proof "
                    "window is shorter); keep it above the members' "
                    "--experimental-watch-progress-notify-interval")
    wipe_on_start: bool = Field(default=False,
                                description="always refused in cluster mode: cards are shared")
    start_timeout: float = Field(
        default=3.0, gt=0.0, le=60.0,
        description="how long start() waits for the first probe of the cards")
    vouch: bool = Field(
        default=True,
        description="use a registry entry only when its host's report vouches for it "
                    "(docs/security.md); false only for a test rig playing the leader")
    hosts: dict[str, list[str]] | None = Field(
        default=None, max_length=HOSTS_MAX,
        description="each storage host's allowed target addresses (addresses or CIDR "
                    "networks); absent: addresses are not checked, the reports still vouch")

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, v: dict[str, list[str]] | None) -> dict[str, list[str]] | None:
        if v is None:
            return v
        for host, nets in v.items():
            _name("host", host)
            if not 1 <= len(nets) <= HOST_NETWORKS_MAX:
                raise ValueError(f"host {host}: 1 to {HOST_NETWORKS_MAX} addresses or networks")
            parse_networks(nets)
        return v

    state: StateSection = StateSection()

    @field_validator("cluster", "host", "pod")
    @classmethod
    def _names(cls, v: str, info: ValidationInfo) -> str:
        return _name(info.field_name or "name", v)

    @field_validator("gateway_id")
    @classmethod
    def _gid(cls, v: str | None) -> str | None:
        return None if v is None else _name("gateway id", v)

    @field_validator("timing")
    @classmethod
    def _workable(cls, t: TimingSection, info: ValidationInfo) -> TimingSection:
        etcd = info.data.get("etcd")
        if etcd is None:        # etcd itself is invalid: that error is reported instead
            return t
        call = etcd.call_timeout
        if t.poll_interval <= call:
            raise ValueError(
                f"poll_interval ({t.poll_interval:g} s) must be longer than "
                f"etcd.call_timeout ({call:g} s): a poll could not finish before the next")
        if t.registration_ttl <= t.poll_interval + 2 * call:
            raise ValueError(
                f"lease_ttl ({t.registration_ttl} s) must be longer than poll_interval + "
                f"2 x etcd.call_timeout ({t.poll_interval + 2 * call:g} s)")
        return t

    @model_validator(mode="after")
    def _id_fits(self) -> GatewayConfig:
        if self.gateway_id is None and len(f"{self.host}-{self.pod}") > 63:
            raise ValueError("host-pod is longer than 63 characters: give gateway_id")
        return self

    @property
    def id(self) -> str:
        return self.gateway_id or f"{self.host}-{self.pod}"

    def allowed(self) -> Allowed | None:
        """``hosts`` as networks (None: not given)."""
        if self.hosts is None:
            return None
        return {h: parse_networks(nets) for h, nets in self.hosts.items()}


def _refuse_plaintext(cfg: GatewayConfig, file: str) -> GatewayConfig:
    """A gateway has no dev_cluster: plain http to another host needs etcd.allow_plaintext.
    An etcd user that is another identity of the access plan is refused too."""
    problems = plaintext_problems(cfg.etcd, dev_cluster=None)
    why = identity_problem(cfg.etcd.username, cfg.cluster,
                           (gateway_user(cfg.cluster, cfg.id), gateway_user(cfg.cluster)),
                           "this gateway")
    if why:
        problems.append(("etcd.username", why))
    if problems:
        raise ConfigError.of(file, problems)
    return cfg


def parse_config(data: object, file: str = "<config>") -> GatewayConfig:
    expect_kind(data, "gateway", file)          # a daemon's file: said in one line
    return _refuse_plaintext(parse(data, GatewayConfig, file), file)


def load_config(path: str | Path) -> GatewayConfig:
    """Read and validate a gateway config file; ConfigError(file, field, reason) if bad
    (``WrongKind`` when it is a daemon's)."""
    return parse_config(read_yaml(path), str(path))
