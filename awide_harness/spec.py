"""What an embedded cluster is made of, its config files and the bounds its timing implies.

Pure: frozen dataclasses and functions from them to config dicts (written as YAML by the
harness) and to convergence bounds (used by the tour and the benchmarks).

Names: storage hosts ``s1..sN``, witness hosts ``w1..wM``, cards ``<host>/<name>`` (by default
``c0..``; directory ``<work>/cards/<host>/<name>``, serial ``EMB-<HOST>-<NAME>``), gateway hosts
``gpu<k>``, gateways ``gpu<k>-vllm-0``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from awide_cluster.config.common import is_loopback_host

DIR_MODEL = "awide-dir-card"
NVME_MODEL = "AWIDE Fake NVMe Ctrl"
NVME_PORT_NETNS = 4420          # an NVMe card's target port when its host is a namespace
API_PORT_NETNS = 9700           # a daemon's API port when its host is a namespace
METRICS_PORT_NETNS = 9701       # a gateway's metrics port when its host is a namespace
ROLES = ("daemon", "gateway", "store")

CardKind = Literal["dir", "nvme"]
Network = Literal["loopback", "netns"]


@dataclass(frozen=True)
class CardPlan:
    """One card of a storage host. ``dir``: a labelled directory with a store service;
    ``nvme``: an NVMe namespace in the host's fake sysfs, reached by every gateway through its
    own fake initiator (``awide_harness.fakes``), with a store service on the target's port."""

    name: str
    kind: CardKind = "dir"


@dataclass(frozen=True)
class Command:
    """A process's command line and extra environment, replacing the harness's default for a
    role (``ClusterSpec.commands``). Placeholders in ``argv``: ``{config}`` (daemon, gateway:
    the config file), ``{host}`` ``{port}`` ``{card}`` ``{dir}`` (store service: where it
    listens, the card key, the card's directory)."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Timing:
    """Daemon and gateway timing (the gateways poll at the daemons' interval)."""

    poll_interval: float = 1.0
    lease_ttl: int = 5
    sick_polls: int = 3
    healthy_polls: int = 1
    call_timeout: float = 0.5
    restart_grace: int | None = None    # the daemons' timing.restart_grace; None: its default

    @classmethod
    def quick(cls) -> Timing:
        """Short timings for tests and ``--quick``: every event still happens, just sooner."""
        return cls(poll_interval=0.25, lease_ttl=2, sick_polls=3, healthy_polls=1,
                   call_timeout=0.2)

    @property
    def gateway_lease_ttl(self) -> int:
        return max(2, self.lease_ttl)

    @property
    def probe_timeout(self) -> float:
        return round(min(0.5, self.poll_interval, self.sick_polls * self.poll_interval / 2), 3)

    def problems(self) -> list[str]:
        """Combinations the daemon or gateway config would refuse, in plain words."""
        out = []
        if not self.lease_ttl > self.poll_interval + 2 * self.call_timeout:
            out.append(f"lease_ttl {self.lease_ttl} s must be longer than poll_interval + "
                       f"2 x call_timeout = {self.poll_interval + 2 * self.call_timeout:g} s")
        if not self.poll_interval > self.call_timeout:
            out.append(f"poll_interval {self.poll_interval:g} s must be longer than "
                       f"call_timeout {self.call_timeout:g} s (gateway polls)")
        return out


@dataclass(frozen=True)
class ClusterSpec:
    """Hosts, gateways and timing of an embedded cluster.

    ``first_leader``: start this host's daemon first and wait until it leads (the tour kills a
    leader that has cards); None starts all daemons together.

    Extension points:
    - ``network``: ``loopback`` (every process on 127.0.0.1) or ``netns`` (root: every daemon
      host and every gateway host is its own network namespace on one bridge, with one etcd
      member per daemon host on the host's address; ``awide_harness.netns``);
    - ``cards``: the cards of each storage host (``CardPlan``: name and kind); empty gives
      every storage host ``cards_per_host`` directory cards ``c0..``;
    - ``commands``: per role (``daemon``, ``gateway``, ``store``) a ``Command`` replacing the
      default program (e.g. an instrumented gateway), with extra environment;
    - ``etcd_binary`` (default: ``etcd`` on PATH or beside this Python), ``etcd_args`` (extra
      flags of every member, e.g. ``--quota-backend-bytes=16777216``; one named like a
      housekeeping default of ``etcd_cluster.HOUSEKEEPING`` replaces it), ``etcd_unsafe_no_fsync``
      (test speed over durability, on by default);
    - ``secure``: etcd serves TLS (a test PKI) with authentication on, and every daemon and
      gateway connects as its own least-privilege user (``awide_cluster.access``, passwords in
      files); loopback only;
    - ``allowed_addresses``: every gateway config and daemon config lists each storage host's
      allowed target address (``hosts`` / ``addresses``: its own address), as the inventory
      gives them.
    """

    cluster: str = "demo"
    storage_hosts: int = 2
    cards_per_host: int = 2
    witness_hosts: int = 1
    gateways: int = 2
    timing: Timing = Timing()
    etcd_binary: str | None = None
    etcd_members: int = 3
    first_leader: str | None = None
    model: str = "demo/tiny-llm"
    network: Network = "loopback"
    cards: Mapping[str, tuple[CardPlan, ...]] = field(default_factory=dict)
    commands: Mapping[str, Command] = field(default_factory=dict)
    etcd_args: tuple[str, ...] = ()
    etcd_unsafe_no_fsync: bool = True
    secure: bool = False
    # sections added to every daemon's config as they are (e.g. ``{"damping": {...}}``; flap
    # damping is off, ``{"outs": 0}``, unless given here)
    daemon_extra: Mapping[str, Any] = field(default_factory=dict)
    allowed_addresses: bool = False

    @property
    def storage_names(self) -> tuple[str, ...]:
        return tuple(f"s{i + 1}" for i in range(self.storage_hosts))

    @property
    def witness_names(self) -> tuple[str, ...]:
        return tuple(f"w{i + 1}" for i in range(self.witness_hosts))

    @property
    def hosts(self) -> tuple[str, ...]:
        return self.storage_names + self.witness_names

    @property
    def gateway_ids(self) -> tuple[str, ...]:
        return tuple(gateway_id(i) for i in range(self.gateways))

    @property
    def gateway_hosts(self) -> tuple[str, ...]:
        return tuple(gateway_host(i) for i in range(self.gateways))

    def card_plans(self, host: str) -> tuple[CardPlan, ...]:
        """The cards a storage host starts with."""
        if self.cards:
            return tuple(self.cards.get(host, ()))
        if host not in self.storage_names:
            return ()
        return tuple(CardPlan(f"c{i}") for i in range(self.cards_per_host))

    @property
    def has_nvme(self) -> bool:
        return any(p.kind == "nvme" for h in self.storage_names for p in self.card_plans(h))

    def role(self, host: str) -> str:
        return "storage" if host in self.storage_names else "witness"

    def problems(self) -> list[str]:
        out = list(self.timing.problems())
        if self.etcd_members < 3:
            out.append("the daemons need an etcd cluster of 3 or more members")
        if not self.hosts:
            out.append("no daemon host")
        if sum(len(self.card_plans(h)) for h in self.storage_names) > 8:
            out.append("at most 8 cards take a slot")
        for host, plans in self.cards.items():
            if host not in self.storage_names:
                out.append(f"cards of {host!r}, which is no storage host {self.storage_names}")
            names = [p.name for p in plans]
            if len(set(names)) != len(names):
                out.append(f"card names of {host} repeat: {names}")
        for role in self.commands:
            if role not in ROLES:
                out.append(f"command for {role!r}: roles are {', '.join(ROLES)}")
        if self.network not in ("loopback", "netns"):
            out.append(f"network {self.network!r}: loopback or netns")
        if self.network == "netns" and self.etcd_members != len(self.hosts):
            out.append(f"netns: one etcd member per daemon host ({len(self.hosts)}), "
                       f"not {self.etcd_members}")
        if self.secure and self.network != "loopback":
            out.append("secure: loopback only")
        if self.first_leader is not None and self.first_leader not in self.hosts:
            out.append(f"first_leader {self.first_leader!r} is not one of {self.hosts}")
        return out


def gateway_host(index: int) -> str:
    return f"gpu{index + 1}"


def gateway_id(index: int) -> str:
    return f"{gateway_host(index)}-vllm-0"


def card_key(host: str, index: int) -> str:
    return f"{host}/c{index}"


def card_serial(key: str) -> str:
    return "EMB-" + key.replace("/", "-").upper()


def nvme_serial(key: str) -> str:
    return ("EN" + key.replace("/", "").upper())[:20]


def nvme_nqn(key: str) -> str:
    return "nqn.2024-01.io.awide:" + key.replace("/", "-")


def nvme_nguid(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def card_spec(name: str, path: str, store_port: int, timing: Timing,
              listen: str = "127.0.0.1") -> dict[str, Any]:
    return {"name": name, "kind": "dir", "path": path,
            "store": {"tcp": f"{listen}:{store_port}"}, "probe_timeout": timing.probe_timeout}


def nvme_card_spec(name: str, key: str, listen: str, port: int, timing: Timing) -> dict[str, Any]:
    return {"name": name, "kind": "nvme", "serial": nvme_serial(key),
            "target": {"transport": "tcp", "traddr": listen, "trsvcid": port,
                       "subnqn": nvme_nqn(key)},
            "store": {"tcp": f"{listen}:{port}"}, "probe_timeout": timing.probe_timeout}


def etcd_section(endpoints: tuple[str, ...], timing: Timing,
                 plaintext: bool = False, auth: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``plaintext``: http endpoints off loopback (between namespaces) are allowed. ``auth``:
    fields added to the section (``tls``, ``username``, ``password_file``)."""
    out: dict[str, Any] = {"endpoints": list(endpoints), "call_timeout": timing.call_timeout,
                           "hedge_after": round(min(0.05, timing.call_timeout / 4), 3)}
    if plaintext:
        out["allow_plaintext"] = True
    out.update(auth or {})
    return out


def daemon_config(spec: ClusterSpec, host: str, endpoints: tuple[str, ...], api_port: int,
                  cards: list[dict[str, Any]], *, address: str = "127.0.0.1",
                  sysfs_root: str | None = None,
                  auth: Mapping[str, Any] | None = None,
                  allowed: Mapping[str, list[str]] | None = None,
                  damping_off: bool = True) -> dict[str, Any]:
    t = spec.timing
    doc: dict[str, Any] = {
        "cluster": spec.cluster, "host": host, "hosts": list(spec.hosts),
        "role": spec.role(host),
        "etcd": etcd_section(endpoints, t, plaintext=spec.network == "netns", auth=auth),
        "timing": {"poll_interval": t.poll_interval, "lease_ttl": t.lease_ttl,
                   "sick_polls": t.sick_polls, "healthy_polls": t.healthy_polls,
                   **({} if t.restart_grace is None else {"restart_grace": t.restart_grace})},
        "api": {"listen": f"{address}:{api_port}",
                # a network namespace's own address: test clusters serve the API in plain HTTP
                **({} if is_loopback_host(address) else {"allow_insecure": True})},
        "cards": list(cards),
    }
    if sysfs_root is not None:
        doc["sysfs_root"] = sysfs_root
    # flap damping off unless a test sets it: the harness's clusters fault one card many times
    # (campaigns, benchmarks, tours) and measure each fault's detection and return;
    # ``damping_off`` False: no section (a release before damping refuses it)
    if damping_off:
        doc["damping"] = {"outs": 0}
    doc.update(spec.daemon_extra)
    if allowed is not None:
        doc["addresses"] = {h: list(a) for h, a in allowed.items()}
    return doc


def gateway_config(spec: ClusterSpec, index: int, endpoints: tuple[str, ...],
                   nvme: Mapping[str, Any] | None = None,
                   auth: Mapping[str, Any] | None = None,
                   allowed: Mapping[str, list[str]] | None = None) -> dict[str, Any]:
    """``nvme``: the gateway's ``nvme`` section (its fake initiator), when there are NVMe
    cards. ``allowed``: each storage host's allowed target addresses (``hosts``)."""
    t = spec.timing
    doc: dict[str, Any] = {
        "mode": "cluster", "cluster": spec.cluster, "host": gateway_host(index),
        "pod": "vllm-0",
        "etcd": etcd_section(endpoints, t, plaintext=spec.network == "netns", auth=auth),
        "timing": {"poll_interval": t.poll_interval, "sick_polls": t.sick_polls,
                   "healthy_polls": t.healthy_polls, "lease_ttl": t.gateway_lease_ttl},
        "key_placement": "dialog",
        "model": {"name": spec.model},
        "start_timeout": max(1.0, 4 * t.poll_interval),
    }
    if nvme is not None:
        doc["nvme"] = dict(nvme)
    if allowed is not None:
        doc["hosts"] = {h: list(a) for h, a in allowed.items()}
    return doc


@dataclass(frozen=True)
class Bounds:
    """Seconds within which every gateway must have seen a change (generous: derived from the
    timing plus slack for a loaded machine). See ``bounds``."""

    detection: float      # a card's store dies -> out on every gateway
    return_: float        # the store is back -> in on every gateway
    join: float           # a new card (SIGHUP) -> placed and in on every gateway
    election: float       # the leader daemon SIGKILLed -> another host holds `leader`
    handover: float       # ... -> the dead leader's cards out on every gateway
    restart: float        # the killed daemon restarted -> its cards in on every gateway
    agreement: float      # after convergence -> every gateway shows the same table and states
    freeze_hold: float    # how long the tour keeps an etcd member frozen
    slack: float

    def to_dict(self) -> dict[str, float]:
        return {"detection": self.detection, "return": self.return_, "join": self.join,
                "election": self.election, "handover": self.handover, "restart": self.restart,
                "agreement": self.agreement, "freeze_hold": self.freeze_hold,
                "slack": self.slack}


def bounds(t: Timing, *, start_slack: float = 6.0) -> Bounds:
    """Derived bounds. P poll, C call bound, S sick polls, H healthy polls, T lease TTL; the
    gateway polls every P too (its registry watch usually wakes it sooner).

    - detection = (S + 2)·P + P + 4·C + slack: S bad reports, the leader's cycle phase and one
      report of jitter, the gateway's poll, the calls on the way;
    - return = (H + 2)·P + P + 4·C + slack; join = return + P (the reload applies next turn);
    - election = T + P + 2·C + slack: the dead leader's lease expires, a host campaigns;
    - handover = election + (S + 1)·P + P + 2·C: the new leader counts S polls without the dead
      host's report;
    - restart = return + ``start_slack`` (a Python process starting on a loaded machine);
    - agreement = P + 2·C + slack.
    slack = 1.5 s + 2·P.
    """
    P, C, S, H, T = t.poll_interval, t.call_timeout, t.sick_polls, t.healthy_polls, t.lease_ttl
    slack = 1.5 + 2 * P
    detection = (S + 2) * P + P + 4 * C + slack
    return_ = (H + 2) * P + P + 4 * C + slack
    election = T + P + 2 * C + slack
    r = lambda x: round(x, 3)  # noqa: E731
    return Bounds(
        detection=r(detection), return_=r(return_), join=r(return_ + P),
        election=r(election), handover=r(election + (S + 1) * P + P + 2 * C),
        restart=r(return_ + start_slack), agreement=r(P + 2 * C + slack),
        freeze_hold=r(T + 2 * P), slack=r(slack))
