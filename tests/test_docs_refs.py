"""The docs as references: what they name exists, what they quote is the code's.

- docs/architecture.md names only module paths that exist (a backticked ``x/y.py`` or
  ``pkg/``, relative to the repository root or to a package; a bare ``name.py`` relative to a
  folder named before it on the same line, or to the section's package);
- README.md's layout table lists every top-level folder, and only folders that exist;
- every limit, default and label a doc quotes in ``QUOTES`` is the constant it comes from.

A failure lists every miss at once (doc, line, what), so renames can be fixed in one pass.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from awide_cluster import logs
from awide_cluster.api import server
from awide_cluster.cli.main import cli
from awide_cluster.config import common as common_config
from awide_cluster.config import daemon as daemon_config
from awide_cluster.contract import bounds, keys, untrusted
from awide_cluster.daemon import cycles, leader_read, leader_watch, reconcile
from awide_cluster.operator import clusters
from awide_cluster.operator.judge import etcd as judge_etcd
from awide_cluster.store import bounded, credentials, hedge, session, transport
from awide_cluster.store import config as store_config
from awide_cluster.store.errors import WRITE_REFUSAL_REASONS, ValueTooLarge
from awide_gateway_cluster import backoff, gateway
from awide_gateway_cluster import config as gateway_config
from awide_gateway_cluster.connector import SWEEP_MAX

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("awide_cluster", "awide_gateway_cluster", "awide_harness")

# ---------------------------------------------------------------- architecture paths

TICKED = re.compile(r"`([^`\s]+)`")
REPO_PATH = re.compile(r"^(?:[\w.-]+/)*[\w.-]+(?:\.py|/)$")
# files of other projects the architecture names for comparison, and etcd key prefixes
FOREIGN = frozenset({"ha.py"}) | {v for k, v in vars(keys).items()
                                 if k.isupper() and isinstance(v, str) and v.endswith("/")}


def _lines(doc: Path) -> Iterator[tuple[int, str]]:
    yield from enumerate(doc.read_text().splitlines(), 1)


def _section_base(heading: str) -> tuple[Path, ...]:
    """Where a bare file name resolves by default: the package a section is about."""
    for package in PACKAGES:
        if f"`{package}/`" in heading:
            return (ROOT / package,)
    return tuple(ROOT / p for p in PACKAGES[:2])


def architecture_paths() -> list[tuple[int, str, bool]]:
    """Every repository path docs/architecture.md names: (line, path, exists)."""
    found: list[tuple[int, str, bool]] = []
    section: tuple[Path, ...] = _section_base("")
    for n, line in _lines(ROOT / "docs" / "architecture.md"):
        if line.startswith("#"):
            section = _section_base(line)
        folders: list[Path] = []               # folders named earlier on this line
        for token in TICKED.findall(line):
            path = re.split(r"::|:(?=\d)", token)[0]
            if not REPO_PATH.match(path) or path in FOREIGN:
                continue
            if "/" in path.rstrip("/"):
                bases = [ROOT, *(ROOT / p for p in PACKAGES)]
            elif path.endswith("/"):
                bases = [ROOT, *(ROOT / p for p in PACKAGES), *folders]
            else:                               # a bare file name: beside what the line named
                bases = folders or list(section)
            hits = [b / path for b in bases if (b / path).exists()]
            found.append((n, path, bool(hits)))
            if path.endswith("/") and hits:
                folders = [hits[0]]
            elif "/" in path and hits:
                folders = [hits[0].parent]
    return found


def test_architecture_names_only_existing_modules() -> None:
    paths = architecture_paths()
    assert len(paths) > 40                      # the scan finds the module tables
    missing = [f"docs/architecture.md:{n}: `{p}`" for n, p, ok in paths if not ok]
    assert not missing, ("docs/architecture.md names module paths that do not exist (renamed "
                         "or removed? name the current module):\n" + "\n".join(missing))


# ---------------------------------------------------------------- README layout

def readme_layout() -> dict[str, int]:
    """The folders README.md's layout table names: folder -> line."""
    named: dict[str, int] = {}
    in_layout = False
    for n, line in _lines(ROOT / "README.md"):
        if line.startswith("## "):
            in_layout = line.strip() == "## Layout"
        elif in_layout and line.startswith("| `"):
            first = line.split("|")[1]
            for folder in re.findall(r"`([\w.-]+)/`", first):
                named[folder] = n
    return named


def top_level_folders() -> set[str]:
    """The repository's top-level folders: tracked ones, else the visible ones on disk."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True,
                             text=True, check=True, timeout=30).stdout
        tracked = {f.split("/")[0] for f in out.splitlines() if "/" in f}
    except (OSError, subprocess.SubprocessError):
        tracked = set()
    if tracked:
        return {t for t in tracked if not t.startswith(".")}
    return {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")
            and p.name not in ("build", "dist", "__pycache__")
            and not p.name.endswith(".egg-info")}


def test_readme_layout_matches_folders() -> None:
    named = readme_layout()
    assert named, "README.md has no layout table (## Layout, rows starting | `folder/`)"
    gone = [f"README.md:{n}: `{f}/` is not a folder" for f, n in named.items()
            if not (ROOT / f).is_dir()]
    unlisted = sorted(top_level_folders() - set(named))
    assert not gone and not unlisted, "README.md's layout table does not match the folders:\n" \
        + "\n".join(gone + [f"README.md: `{f}/` is missing from the layout table"
                            for f in unlisted])


# ---------------------------------------------------------------- quoted limits

def size(n: int) -> str:
    """Bytes as the docs write them: ``512 KiB``, ``4 MiB``, ``1 KiB``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"


def count(n: int) -> str:
    """A count as the docs write it: 2048 or 2,048 (both accepted, see ``same``)."""
    return str(n)


def number(x: float) -> str:
    """A decimal without a useless ``.0``: 1.5, 30, 1.4."""
    return f"{x:g}"


@dataclass(frozen=True)
class Quote:
    doc: str          # relative to the repository root
    pattern: str      # a regular expression with one group: the quoted value
    value: str        # what the code says, written as the doc writes it
    source: str       # where the value comes from, for the failure message


def _too_large_label() -> str:
    refused = ValueTooLarge("over", key="registry", limit=bounds.REGISTRY_MAX_BYTES,
                            size=bounds.REGISTRY_MAX_BYTES + 1, mod_revision=7)
    return leader_read.registry_found(refused).found


_GW = gateway_config.TimingSection.model_fields
_DAEMON = daemon_config.TimingSection.model_fields
_ETCD = common_config.EtcdSection.model_fields


def _status_default(option: str) -> str:
    """The default of one ``awide-cluster status`` option, as the docs write it."""
    command = cli.commands["status"]
    value = next(p.default for p in command.params if p.name == option)
    assert isinstance(value, int | float), f"status --{option} has no number default"
    return number(float(value))

_GW_TOP = gateway_config.GatewayConfig.model_fields

QUOTES: tuple[Quote, ...] = (
    # the log's repeat filter (logs.py)
    Quote("docs/operations.md", r"pass at most (\d+) times in \d+ s",
          count(logs.REPEAT_BURST), "logs.REPEAT_BURST"),
    Quote("docs/operations.md", r"pass at most \d+ times in (\d+) s",
          number(logs.REPEAT_WINDOW), "logs.REPEAT_WINDOW"),
    # the config loader's limits (config/common.py)
    Quote("docs/config.md", r"or is over (\d+ [KMG]iB) \(refused from its size",
          size(common_config.MAX_CONFIG_BYTES), "common.MAX_CONFIG_BYTES"),
    Quote("docs/config.md", r"collections nested deeper than (\d+) levels",
          count(common_config.MAX_DEPTH), "common.MAX_DEPTH"),
    Quote("docs/config.md", r"more than ([\d,]+) values, or",
          count(common_config.MAX_NODES), "common.MAX_NODES"),
    Quote("docs/config.md", r"or more than (\d+) alias uses",
          count(common_config.MAX_ALIASES), "common.MAX_ALIASES"),
    # the bounds of what is read from etcd (contract/bounds.py, contract/untrusted.py)
    Quote("docs/registry.md", r"\| registry \| `registry` \| ([^|]+?) \|",
          size(bounds.REGISTRY_MAX_BYTES), "bounds.REGISTRY_MAX_BYTES"),
    Quote("docs/registry.md", r"\| registry \| `registry` \| [^|]+ \| (\d+) \|",
          count(untrusted.REGISTRY_LIMITS.max_depth), "untrusted.REGISTRY_LIMITS.max_depth"),
    Quote("docs/registry.md", r"\| host report \| `members/<host>` \| ([^|]+?) \|",
          size(bounds.REPORT_MAX_BYTES), "bounds.REPORT_MAX_BYTES"),
    Quote("docs/registry.md", r"\| host report \| `members/<host>` \| [^|]+ \| (\d+) \|",
          count(untrusted.REPORT_LIMITS.max_depth), "untrusted.REPORT_LIMITS.max_depth"),
    Quote("docs/registry.md", r"\| leader, gateway, layout, intent records \| [^|]+ \| ([^|]+?) \|",
          size(bounds.RECORD_MAX_BYTES), "bounds.RECORD_MAX_BYTES"),
    Quote("docs/registry.md",
          r"\| leader, gateway, layout, intent records \| [^|]+ \| [^|]+ \| (\d+) \|",
          count(untrusted.RECORD_LIMITS.max_depth), "untrusted.RECORD_LIMITS.max_depth"),
    Quote("docs/registry.md", r"\| history \| `history` \| ([^|]+?) \|",
          size(bounds.HISTORY_MAX_BYTES), "bounds.HISTORY_MAX_BYTES"),
    Quote("docs/registry.md", r"\| history \| `history` \| [^|]+ \| (\d+) \|",
          count(untrusted.HISTORY_LIMITS.max_depth), "untrusted.HISTORY_LIMITS.max_depth"),
    Quote("docs/registry.md", r"`cards` ≤ ([\d,]+), `unplaced`",
          count(untrusted.REGISTRY_CARDS_MAX), "untrusted.REGISTRY_CARDS_MAX"),
    Quote("docs/registry.md", r"`cards` ≤ ([\d,]+) \(the config's bound\)",
          count(untrusted.REPORT_CARDS_MAX), "untrusted.REPORT_CARDS_MAX"),
    Quote("docs/registry.md", r"`probes` ≤ (\d+) per card",
          count(untrusted.PROBES_MAX), "untrusted.PROBES_MAX"),
    Quote("docs/registry.md", r"`entries` ≤ (\d+)",
          count(bounds.HISTORY_MAX_ENTRIES), "bounds.HISTORY_MAX_ENTRIES"),
    Quote("docs/registry.md", r"at most (\d+) entries and",
          count(bounds.HISTORY_MAX_ENTRIES), "bounds.HISTORY_MAX_ENTRIES"),
    Quote("docs/registry.md", r"A reason is at most (\d+) characters",
          count(untrusted.HISTORY_REASON_MAX), "untrusted.HISTORY_REASON_MAX"),
    Quote("docs/registry.md", r"a watch message over (\d+ \w+) is refused unread",
          size(leader_watch.LEADER_WATCH_MESSAGE_BYTES), "leader_watch.LEADER_WATCH_MESSAGE_BYTES"),
    Quote("docs/registry.md", r"over its size bound \(([^)]+)\)",
          size(bounds.REGISTRY_MAX_BYTES), "bounds.REGISTRY_MAX_BYTES"),
    Quote("docs/registry.md", r"over its size bound [^|]+\|[^|]+\| [^|]*\{found=\"(\w+)\"\}",
          _too_large_label(), "leader_read.registry_found(ValueTooLarge(...)).found"),
    Quote("docs/operations.md", r"a host report (\d+ \w+), the registry",
          size(bounds.REPORT_MAX_BYTES), "bounds.REPORT_MAX_BYTES"),
    Quote("docs/operations.md", r"a host report \d+ \w+, the registry (\d+ \w+)",
          size(bounds.REGISTRY_MAX_BYTES), "bounds.REGISTRY_MAX_BYTES"),
    Quote("docs/operations.md", r"any other key (\d+ \w+)\)",
          size(bounds.RECORD_MAX_BYTES), "bounds.RECORD_MAX_BYTES"),
    Quote("docs/operations.md", r"whose name is over (\d+) bytes",
          count(bounded.MAX_KEY_BYTES), "bounded.MAX_KEY_BYTES"),
    Quote("docs/operations.md", r"awide_registry_repairs_total\{found=\"(too_\w+)\"\}",
          _too_large_label(), "leader_read.registry_found(ValueTooLarge(...)).found"),
    Quote("docs/operations.md", r"more than ([\d,]+) keys under the cluster prefix",
          count(bounds.CLUSTER_MAX_KEYS), "bounds.CLUSTER_MAX_KEYS"),
    Quote("docs/metrics.md", r"over the (\d+) keys `status` reads",
          count(bounds.CLUSTER_MAX_KEYS), "bounds.CLUSTER_MAX_KEYS"),
    Quote("docs/operations.md", r"at most (\d+) names",
          count(clusters.MAX_NAMES), "clusters.MAX_NAMES"),
    Quote("docs/operations.md", r"`--reason`, at most (\d+) characters",
          count(untrusted.INTENT_REASON_MAX), "untrusted.INTENT_REASON_MAX"),
    Quote("docs/operations.md", r"`etcd_db_near_quota` \| warning \| [^|]*? at (\d+) %",
          number(judge_etcd.NEAR_QUOTA * 100), "judge.etcd.NEAR_QUOTA"),
    Quote("docs/operations.md", r"a request line over (\d+ \w+)",
          size(server.MAX_LINE_SIZE), "api.server.MAX_LINE_SIZE"),
    Quote("docs/operations.md", r"a header field over (\d+ \w+)",
          size(server.MAX_FIELD_SIZE), "api.server.MAX_FIELD_SIZE"),
    Quote("docs/operations.md", r"more than (\d+) headers",
          count(server.MAX_HEADERS), "api.server.MAX_HEADERS"),
    Quote("docs/security.md", r"At most (\d+) connections are$",
          count(server.MAX_CONNECTIONS), "api.server.MAX_CONNECTIONS"),
    Quote("docs/security.md", r"^open in all and (\d+) from one peer",
          count(server.MAX_PEER_CONNECTIONS), "api.server.MAX_PEER_CONNECTIONS"),
    Quote("docs/security.md", r"its handshake within (\d+) s is cut",
          number(server.HANDSHAKE_TIMEOUT), "api.server.HANDSHAKE_TIMEOUT"),
    # the store (store/config.py, store/bounded.py, store/transport.py)
    Quote("docs/store.md", r"max_answer_bytes`, default (\d+ \w+)",
          size(store_config.MAX_ANSWER_BYTES), "store.config.MAX_ANSWER_BYTES"),
    Quote("docs/store.md", r"a key longer than (\d+) bytes",
          count(bounded.MAX_KEY_BYTES), "bounded.MAX_KEY_BYTES"),
    Quote("docs/store.md", r"`BUDGET_RATIO` \(([\d.]+)\)", number(hedge.BUDGET_RATIO),
          "hedge.BUDGET_RATIO"),
    Quote("docs/store.md", r"`BUDGET_BURST` \((\d+)\)", number(hedge.BUDGET_BURST),
          "hedge.BUDGET_BURST"),
    Quote("docs/store.md", r"`BUDGET_START` \((\d+)\)", number(hedge.BUDGET_START),
          "hedge.BUDGET_START"),
    Quote("docs/gateway.md", r"up to `min\((\d+) × poll_interval", number(backoff.CAP_INTERVALS),
          "backoff.CAP_INTERVALS"),
    Quote("docs/store.md", r"\| `members/<host>` \(host report\) \| (\d+ \w+) \|",
          size(bounds.REPORT_MAX_BYTES), "bounds.REPORT_MAX_BYTES"),
    Quote("docs/store.md", r"\| `members/<host>` \(host report\) \| [^|]+ \| (\d+) keys",
          count(bounds.MEMBERS_MAX_KEYS), "bounds.MEMBERS_MAX_KEYS"),
    Quote("docs/store.md", r"\| `registry` \| (\d+ \w+) \| 1 \|",
          size(bounds.REGISTRY_MAX_BYTES), "bounds.REGISTRY_MAX_BYTES"),
    Quote("docs/store.md", r"\| `history` \(the leader's ring\) \| (\d+ \w+) \|",
          size(bounds.HISTORY_MAX_BYTES), "bounds.HISTORY_MAX_BYTES"),
    Quote("docs/store.md",
          r"\| `history` \(the leader's ring\) \| [^|]+ \| 1 \| at most (\d+) entries",
          count(bounds.HISTORY_MAX_ENTRIES), "bounds.HISTORY_MAX_ENTRIES"),
    Quote("docs/store.md", r"\| `intents/<card>` \| (\d+ \w+) \|",
          size(bounds.RECORD_MAX_BYTES), "bounds.RECORD_MAX_BYTES"),
    Quote("docs/store.md",
          r"\| `leader`, `gateways/<id>`, `layouts/<ns>`, any other key \| (\d+ \w+) \|",
          size(bounds.RECORD_MAX_BYTES), "bounds.RECORD_MAX_BYTES"),
    Quote("docs/store.md", r"under the cluster prefix \(status\) \| (\d+ \w+) ",
          size(bounds.REGISTRY_MAX_BYTES), "bounds.REGISTRY_MAX_BYTES (operator/gather.py)"),
    Quote("docs/store.md", r"\| `intents/<card>` \| [^|]+ \| (\d+) per leader cycle",
          count(bounds.INTENTS_MAX_KEYS), "bounds.INTENTS_MAX_KEYS"),
    Quote("docs/store.md", r"everything under the cluster prefix \(status\) \| [^|]+ \| (\d+) keys",
          count(bounds.CLUSTER_MAX_KEYS), "bounds.CLUSTER_MAX_KEYS"),
    # timings and defaults (config/daemon.py, the gateway's config, the leader's decision)
    Quote("docs/deploy.md", r"`(\d+)ms` \(`awide_etcd_progress_notify`\)",
          number(daemon_config.ETCD_PROGRESS_NOTIFY * 1000), "config.daemon.ETCD_PROGRESS_NOTIFY"),
    Quote("docs/config.md", r"notify-interval \(([\d.]+) s as the role",
          number(daemon_config.ETCD_PROGRESS_NOTIFY), "config.daemon.ETCD_PROGRESS_NOTIFY"),
    Quote("docs/deploy.md", r"proves its view fresh for ([\d.]+) polls",
          number(gateway.PROOF_WINDOW), "gateway.PROOF_WINDOW"),
    Quote("docs/config.md", r"lease_ttl: (\d+) +# TTL of the lease gateways/<id>",
          number(_GW["registration_ttl"].default), "gw registration_ttl"),
    Quote("docs/config.md", r"linearizable_every: (\d+) ",
          number(_GW["linearizable_every"].default), "gateway TimingSection.linearizable_every"),
    Quote("docs/config.md", r"watch_stall_after: ([\d.]+) ",
          f"{_GW_TOP['watch_stall_after'].default:.1f}", "GatewayConfig.watch_stall_after"),
    Quote("docs/gateway.md", r"at most (\d+) a round,", count(SWEEP_MAX),
          "connector.SWEEP_MAX"),
    Quote("docs/gateway.md", r"`watch_stall_after` \((\d+) s\)",
          number(_GW_TOP["watch_stall_after"].default), "GatewayConfig.watch_stall_after"),
    Quote("docs/gateway.md", r"TTL `lease_ttl`, (\d+) s by",
          number(_GW["registration_ttl"].default), "gw registration_ttl"),
    Quote("docs/architecture.md", r"at least (\d+) % of a poll apart",
          number(cycles.REPORT_CYCLE_GAP * 100), "cycles.REPORT_CYCLE_GAP"),
    Quote("docs/architecture.md", r"a strict majority \((\d+) or more\)",
          count(reconcile.STOPPED_TOGETHER), "reconcile.STOPPED_TOGETHER"),
    Quote("docs/security.md", r"unreadable, empty, over (\d+ \w+)",
          size(credentials.MAX_CREDENTIAL_BYTES), "store.credentials.MAX_CREDENTIAL_BYTES"),
    Quote("docs/security.md", r"at most (\d+) retired pools",
          count(transport.RETIRED_POOLS), "store.transport.RETIRED_POOLS"),
    # docs/decisions.md quotes the same limits where it says why they are what they are
    Quote("docs/decisions.md", r"every answer at most (\d+ \w+)",
          size(store_config.MAX_ANSWER_BYTES), "store.config.MAX_ANSWER_BYTES"),
    Quote("docs/decisions.md", r"a key\s+name at most (\d+) bytes",
          count(bounded.MAX_KEY_BYTES), "bounded.MAX_KEY_BYTES"),
    Quote("docs/decisions.md", r"`members/` at most (\d+) keys",
          count(bounds.MEMBERS_MAX_KEYS), "bounds.MEMBERS_MAX_KEYS"),
    Quote("docs/decisions.md", r"`intents/` (\d+) per leader cycle",
          count(bounds.INTENTS_MAX_KEYS), "bounds.INTENTS_MAX_KEYS"),
    Quote("docs/decisions.md", r"status (\d+) keys",
          count(bounds.CLUSTER_MAX_KEYS), "bounds.CLUSTER_MAX_KEYS"),
    Quote("docs/decisions.md", r"newest (\d+) entries",
          count(bounds.HISTORY_MAX_ENTRIES), "bounds.HISTORY_MAX_ENTRIES"),
    Quote("docs/decisions.md", r"newest \d+ entries \(at most (\d+ \w+)\)",
          size(bounds.HISTORY_MAX_BYTES), "bounds.HISTORY_MAX_BYTES"),
    Quote("docs/decisions.md", r"`reason` \(at most (\d+) characters",
          count(untrusted.INTENT_REASON_MAX), "untrusted.INTENT_REASON_MAX"),
    Quote("docs/decisions.md", r"one key per cluster, at most (\d+)",
          count(clusters.MAX_NAMES), "clusters.MAX_NAMES"),
    Quote("docs/decisions.md", r"\(at most (\d+) kept\)",
          count(transport.RETIRED_POOLS), "store.transport.RETIRED_POOLS"),
    Quote("docs/decisions.md", r"Report cycles are at least (\d+) % of a poll apart",
          number(cycles.REPORT_CYCLE_GAP * 100), "cycles.REPORT_CYCLE_GAP"),
    Quote("docs/decisions.md", r"### `etcd_db_near_quota` at (\d+) %",
          number(judge_etcd.NEAR_QUOTA * 100), "judge.etcd.NEAR_QUOTA"),
    Quote("docs/decisions.md", r"within ([\d.]+) poll intervals \(`PROOF_WINDOW`\)",
          number(gateway.PROOF_WINDOW), "gateway.PROOF_WINDOW"),
    Quote("docs/decisions.md", r"`--experimental-watch-progress-notify-interval=(\d+)ms`",
          number(daemon_config.ETCD_PROGRESS_NOTIFY * 1000), "config.daemon.ETCD_PROGRESS_NOTIFY"),
    Quote("docs/decisions.md", r"\(bounded to (\d+ \w+), stopped at the\s*$",
          size(session.QUOTA_SCAN_BYTES), "store.session.QUOTA_SCAN_BYTES"),
    Quote("docs/decisions.md", r"`lease_ttl` (\d+) s \(keepalive",
          number(_GW["registration_ttl"].default), "gw registration_ttl"),
    Quote("docs/decisions.md", r"a configurable bound, (\d+) s by default",
          number(_GW_TOP["watch_stall_after"].default), "GatewayConfig.watch_stall_after"),
    Quote("docs/decisions.md", r"at least (\d+) s, or the call bound",
          number(session.AUTH_TIMEOUT_MIN), "store.session.AUTH_TIMEOUT_MIN"),
    Quote("docs/decisions.md", r"less than `SETTLE` \(a (quarter) poll\)",
          {0.25: "quarter", 0.5: "half"}.get(gateway.SETTLE, str(gateway.SETTLE)),
          "gateway.SETTLE"),
    # the configs' defaults (docs/config.md's examples) and the status command's options
    Quote("docs/config.md", r"^  call_timeout: ([\d.]+) ",
          number(_ETCD["call_timeout"].default), "config.common.EtcdSection.call_timeout"),
    Quote("docs/config.md", r"^  hedge_after: ([\d.]+) ",
          number(_ETCD["hedge_after"].default), "config.common.EtcdSection.hedge_after"),
    Quote("docs/config.md", r"^  poll_interval: ([\d.]+) +# one turn",
          f"{_DAEMON['poll_interval'].default:.1f}", "daemon TimingSection.poll_interval"),
    Quote("docs/config.md", r"^  lease_ttl: (\d+) +# whole seconds",
          number(_DAEMON["lease_ttl"].default), "daemon TimingSection.lease_ttl"),
    Quote("docs/config.md", r"^  restart_grace: (\d+) +# whole seconds",
          number(_DAEMON["restart_grace"].default), "daemon TimingSection.restart_grace"),
    Quote("docs/config.md", r"^  sick_polls: (\d+) +# bad observations in a row that",
          number(_DAEMON["sick_polls"].default), "daemon TimingSection.sick_polls"),
    Quote("docs/config.md", r"^  sick_polls: (\d+) +# bad observations in a row before",
          number(_GW["sick_polls"].default), "gateway TimingSection.sick_polls"),
    Quote("docs/operations.md", r"`--sample SECONDS` \| [^|]*\(default (\d+);",
          _status_default("sample"), "awide-cluster status --sample"),
    Quote("docs/operations.md", r"`--stale-after SECONDS` \| [^|]*\(default (\d+)\)",
          _status_default("stale_after"), "awide-cluster status --stale-after"),
    Quote("docs/operations.md", r"`--call-timeout SECONDS` \| [^|]*the config's, ([\d.]+)\)",
          number(_ETCD["call_timeout"].default), "config.common.EtcdSection.call_timeout"),
    Quote("docs/operations.md", r"pages of at most (\d+) keys",
          count(bounded.MAX_PAGE_KEYS), "bounded.MAX_PAGE_KEYS"),
    # labels
    Quote("docs/metrics.md", r"`reason` = ((?:`\w+`\\?\|?)+) \|",
          "\\|".join(f"`{r}`" for r in WRITE_REFUSAL_REASONS),
          "store.errors.WRITE_REFUSAL_REASONS"),
    Quote("docs/decisions.md", r"by the store's error type \(([^)]*)\)",
          ", ".join(f"`{r}`" for r in WRITE_REFUSAL_REASONS),
          "store.errors.WRITE_REFUSAL_REASONS"),
)


def _same(quoted: str, value: str) -> bool:
    return quoted.replace(",", "") == value.replace(",", "")


def test_quoted_limits_are_the_code_constants() -> None:
    assert len(QUOTES) >= 10
    wrong: list[str] = []
    for q in QUOTES:
        seen = 0
        for n, line in _lines(ROOT / q.doc):
            for m in re.finditer(q.pattern, line):
                seen += 1
                if not _same(m.group(1).strip(), q.value):
                    wrong.append(f"{q.doc}:{n}: quotes {m.group(1).strip()!r}, the code says "
                                 f"{q.value!r} ({q.source})")
        if not seen:
            wrong.append(f"{q.doc}: the quote /{q.pattern}/ is gone: write it again or move "
                         f"its entry in QUOTES ({q.source} = {q.value!r})")
    assert not wrong, "docs quote limits the code does not have:\n" + "\n".join(wrong)


# ---------------------------------------------------------------- decision records

def decision_records() -> dict[str, tuple[int, list[str]]]:
    """docs/decisions.md's records: title -> (line, its lines)."""
    records: dict[str, tuple[int, list[str]]] = {}
    current: list[str] | None = None
    for n, line in _lines(ROOT / "docs" / "decisions.md"):
        if line.startswith("### "):
            current = []
            records[line[4:].strip()] = (n, current)
        elif line.startswith("## "):
            current = None
        elif current is not None and line.strip():
            current.append(line)
    return records


def test_decisions_are_short_records() -> None:
    """Each decision: Context, Decision, Consequence, one screen (25 lines), no dated entry."""
    records = decision_records()
    assert len(records) > 50
    bad: list[str] = []
    for title, (n, body) in records.items():
        text = "\n".join(body)
        fields = re.findall(r"^- \*\*(Context|Decision|Consequence):\*\*", text, re.M)
        if fields != ["Context", "Decision", "Consequence"]:
            bad.append(f"docs/decisions.md:{n}: {title!r} has {fields}, "
                       "not Context, Decision, Consequence")
        if len(body) > 25:
            bad.append(f"docs/decisions.md:{n}: {title!r} is {len(body)} lines (at most 25)")
    dated = [f"docs/decisions.md:{n}: a dated entry: {line.strip()[:80]}"
             for n, line in _lines(ROOT / "docs" / "decisions.md")
             if re.search(r"\b20\d\d-\d\d-\d\d\b", line)]
    assert not bad and not dated, "\n".join(bad + dated)
