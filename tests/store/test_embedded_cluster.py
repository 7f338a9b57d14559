"""The embedded etcd launcher: versions, member info, faults, restart, no orphans."""

from __future__ import annotations

import json
import os
import time

import pytest

from awide_harness import EtcdCluster, EtcdClusterError, etcd_version
from tests.timing import bound

from .helpers import admin, b64


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def proc_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_version_helper(etcd_binaries):
    assert etcd_binaries
    for version, path in etcd_binaries.items():
        assert etcd_version(path) == version
    with pytest.raises(EtcdClusterError):
        etcd_version("/bin/true")


def test_member_faults_restart_and_no_orphans(etcd_binary, tmp_path):
    cluster = EtcdCluster(tmp_path, binary=etcd_binary, stop_timeout=0.5)
    pids: list[int] = []
    with cluster:
        infos = [cluster.member(i) for i in range(3)]
        assert [m.state for m in infos] == ["running"] * 3
        urls = [m.client_url for m in infos]
        assert len(set(urls)) == 3 and cluster.client_urls == urls
        pids += [m.pid for m in infos]
        cluster.freeze(1)
        assert cluster.member(1).state == "frozen" and proc_state(pids[1]) == "T"
        cluster.thaw(1)
        assert cluster.member(1).state == "running" and proc_state(pids[1]) != "T"

        admin(cluster.endpoints[0], "/v3/kv/put", {"key": b64("kept"), "value": b64("1")})
        cluster.kill(2)
        assert cluster.member(2).state == "stopped" and cluster.member(2).pid is None
        assert not alive(pids[2])
        cluster.restart(2)
        assert cluster.member(2).state == "running"
        pids.append(cluster.member(2).pid)
        got = admin(cluster.endpoints[2], "/v3/kv/range",
                    {"key": b64("kept"), "serializable": True})
        assert got.get("count") == "1", json.dumps(got)  # same data dir

        cluster.freeze(0)  # stop() must also end frozen members
    assert [cluster.member(i).state for i in range(3)] == ["stopped"] * 3
    assert not any(alive(p) for p in pids)


def test_failed_start_is_bounded_and_leaves_nothing(etcd_binary, tmp_path):
    cluster = EtcdCluster(tmp_path, binary=etcd_binary, extra_args=["--no-such-flag"],
                          ready_timeout=5)
    t0 = time.monotonic()
    with pytest.raises(EtcdClusterError, match="exited"):
        cluster.start()
    assert time.monotonic() - t0 < bound(20)
    assert [cluster.member(i).state for i in range(3)] == ["stopped"] * 3
