"""Which etcd releases carry a known authentication bypass, and status's warning about them
(pure: no etcd)."""

from __future__ import annotations

import pytest

from awide_cluster.contract.etcd_version import advisories, note, parse
from awide_cluster.operator.model import EtcdMemberView, EtcdView
from awide_cluster.operator.status import vulnerable


@pytest.mark.parametrize(("version", "fixed"), [
    ("3.5.1", "3.5.9"), ("3.5.8", "3.5.9"), ("v3.4.23", "3.4.26"), ("3.4.25", "3.4.26"),
    ("3.3.27", "install 3.5.9 or later")])
def test_old_releases_name_the_cve_and_the_fixed_release(version: str, fixed: str) -> None:
    (line,) = advisories(version)
    assert "CVE-2023-32082" in line and fixed in line


@pytest.mark.parametrize("version", ["3.5.9", "3.5.17", "3.4.26", "3.6.0", "", "garbage"])
def test_fixed_or_unreadable_releases_say_nothing(version: str) -> None:
    assert advisories(version) == ()


def test_parse() -> None:
    assert parse("3.5.1-rc.0") == (3, 5, 1) and parse("x3.5") is None


def member(name: str, version: str) -> EtcdMemberView:
    return EtcdMemberView(name=name, id="1", endpoint=f"https://{name}:2379", reachable=True,
                          is_leader=False, raft_term=1, raft_index=1, version=version,
                          db_size=1, error="")


def test_status_names_the_vulnerable_members_once() -> None:
    view = EtcdView(quorum="ok", up=3, total=3, leader="a", raft_term=1,
                    members=(member("a", "3.5.1"), member("b", "3.5.1"), member("c", "3.5.9")))
    (p,) = vulnerable(view)
    assert p.code == "etcd_vulnerable" and p.severity == "warning" and not p.holds
    assert p.message.startswith("a, b: etcd 3.5.1 has CVE-2023-32082") and "3.5.9" in p.message
    assert "c" not in p.message.split(":")[0]
    assert vulnerable(EtcdView(quorum="ok", up=1, total=1, leader="c", raft_term=1,
                               members=(member("c", "3.5.9"),))) == []
    assert note({}) == ""
