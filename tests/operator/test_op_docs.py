"""docs/operations.md lists every problem code status can report."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def test_every_problem_code_is_documented():
    src = ROOT / "awide_cluster" / "operator" / "status.py"
    codes = set(re.findall(r'Problem\(\s*"(?:error|warning)",\s*"([a-z_]+)"', src.read_text()))
    assert len(codes) > 25
    text = (DOCS / "operations.md").read_text()
    missing = sorted(c for c in codes if f"`{c}`" not in text)
    assert not missing, f"problem codes not in docs/operations.md: {missing}"
