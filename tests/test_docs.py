"""The docs stand alone and agree with the code: every relative link and every repository
path that README.md and docs/*.md mention exists, every ``make`` target they name is in the
Makefile, none refers to an issue number or to a file outside the repository, and the lists
tests can check hold both ways (problem codes in docs/operations.md, metric families in
docs/metrics.md). A failure names the doc, the line and what is wrong."""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from pathlib import Path

from awide_cluster.api.metrics import DaemonMetrics

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# top-level folders and files of the repository a doc may name
TOP = ("awide_cluster", "awide_gateway_cluster", "tests", "bench", "ansible", "systemd",
       "docs", ".ci")
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(re.escape(t) for t in TOP)
                  + r")/[\w./<>*{}-]*[\w>*}/])")
# a module path short of its package (``daemon/leader.py``): under a product package
SHORT = re.compile(r"(?<![\w./-])((?:[a-z_]+/)+[a-z_0-9]+\.py)\b")
DOTTED = re.compile(r"\b(awide_(?:cluster|gateway_cluster)(?:\.[A-Za-z_]\w*)+)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
MAKE = re.compile(r"\bmake ([a-z][a-z0-9_-]*)")
ISSUE = re.compile(r"\b[Ii]ssues? ?#?\d+|(?<![\w&])#\d+\b")


def lines(doc: Path) -> Iterator[tuple[int, str]]:
    """The doc's lines with their numbers (1-based)."""
    yield from enumerate(doc.read_text().splitlines(), 1)


def where(doc: Path, n: int) -> str:
    return f"{doc.relative_to(ROOT)}:{n}"


def exists(path: str) -> bool:
    """A repository path as docs write it: a placeholder (``<host>``) or glob matches any
    name; ``file.py:12`` or ``file.py::name`` is the file."""
    path = re.split(r"::|:(?=\d)", path)[0].rstrip("/")
    pattern = re.sub(r"<[^>]*>|\{[^}]*\}", "*", path)
    if "*" in pattern:
        return any(ROOT.glob(pattern))
    return (ROOT / pattern).exists()


def short_exists(path: str) -> bool:
    return any((ROOT / package / path).exists()
               for package in ("awide_cluster", "awide_gateway_cluster", "."))


def importable(dotted: str) -> bool:
    """A module, or a name in one (``awide_cluster.api.metrics.DaemonMetrics``)."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if not hasattr(value, name):
                return False
            value = getattr(value, name)
        return True
    return False


def test_links_and_paths_exist():
    missing = []
    for doc in DOCS:
        for n, line in lines(doc):
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target) or target.startswith("#"):
                    continue                    # a URL or an anchor in the same doc
                path = (doc.parent / target.split("#")[0]).resolve()
                if not path.is_relative_to(ROOT):
                    missing.append(f"{where(doc, n)}: link {target} leaves the repository")
                elif not path.exists():
                    missing.append(f"{where(doc, n)}: link {target} does not exist")
            for path in PATH.findall(line):
                if not exists(path):
                    missing.append(f"{where(doc, n)}: {path} does not exist")
            for path in SHORT.findall(line):
                if path.split("/")[0] not in TOP and not short_exists(path):
                    missing.append(f"{where(doc, n)}: {path} is in no package")
            for dotted in DOTTED.findall(line):
                if not importable(dotted):
                    missing.append(f"{where(doc, n)}: {dotted} does not import")
    assert not missing, "docs name what the repository does not hold:\n" + "\n".join(missing)


def test_make_targets_exist():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-zA-Z0-9_-]+):", makefile, re.M))
    unknown = [f"{where(doc, n)}: make {t}" for doc in DOCS for n, line in lines(doc)
               for t in MAKE.findall(line) if t not in targets]
    assert not unknown, "make targets not in the Makefile:\n" + "\n".join(unknown)


def test_docs_stand_alone():
    """No issue numbers and nothing outside the repository (``../``, a shared folder)."""
    found = []
    for doc in DOCS:
        for n, line in lines(doc):
            if ISSUE.search(line):
                found.append(f"{where(doc, n)}: an issue number: {line.strip()[:100]}")
            if re.search(r"(?<![\w.])\.\./|\bshared/", line):
                found.append(f"{where(doc, n)}: a path outside the repository: "
                             f"{line.strip()[:100]}")
    assert not found, "\n".join(found)


# ---------------------------------------------------------------------- claims

def emitted_problem_codes() -> set[str]:
    codes: set[str] = set()
    for src in (ROOT / "awide_cluster" / "operator").rglob("*.py"):
        codes |= set(re.findall(r'Problem\(\s*"(?:error|warning)",\s*"([a-z_]+)"',
                                src.read_text()))
    return codes


def documented_problem_codes() -> dict[str, int]:
    """The codes of the problem table of docs/operations.md (``| `code` | severity |``)."""
    doc = ROOT / "docs" / "operations.md"
    return {m.group(1): n for n, line in lines(doc)
            if (m := re.match(r"\| `([a-z_]+)` \| (?:error|warning)", line))}


def test_problem_codes_documented_both_ways():
    emitted, documented = emitted_problem_codes(), documented_problem_codes()
    assert len(emitted) > 25                     # the scan finds the judgement's codes
    undocumented = sorted(emitted - set(documented))
    assert not undocumented, f"problem codes status emits, not in docs/operations.md: " \
                             f"{undocumented}"
    stale = [f"docs/operations.md:{n}: {c}" for c, n in documented.items() if c not in emitted]
    assert not stale, "problem codes documented but never emitted:\n" + "\n".join(stale)


def test_metric_families_documented_both_ways():
    from awide_gateway_cluster import ClusterGateway, parse_config
    from awide_gateway_cluster.metrics import families
    metrics = DaemonMetrics(host="h", role="storage", version="x")
    gateway = ClusterGateway(parse_config({                # not started: no I/O
        "mode": "cluster", "cluster": "kv", "host": "gpu1", "pod": "p1",
        "etcd": {"endpoints": ["http://127.0.0.1:2379"]},
        "model": {"name": "test/model-7b", "num_layers": 4}}))
    exposed = {{"counter": name + "_total", "info": name + "_info"}.get(kind, name)
               for name, kind in (*metrics.families(), *families(gateway))}
    doc = ROOT / "docs" / "metrics.md"
    documented = {m.group(1): n for n, line in lines(doc)
                  if (m := re.match(r"\| `((?:awide|process)_[a-z_]+)` \|", line))}
    assert not sorted(exposed - set(documented)), \
        f"metrics not in docs/metrics.md: {sorted(exposed - set(documented))}"
    stale = [f"docs/metrics.md:{n}: {name}" for name, n in documented.items()
             if name not in exposed]
    assert not stale, "metrics documented but not exposed:\n" + "\n".join(stale)
