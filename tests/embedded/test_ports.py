"""The harness's ports: outside the ephemeral range, reserved across processes, really free."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awide_harness import ports
from awide_harness.ports import candidate_range, release, reserve_port

HOLDER = ("import sys\n"
          "from awide_harness.ports import reserve_port\n"
          "print(reserve_port(), flush=True)\n"
          "sys.stdin.readline()\n")


@pytest.fixture
def port_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("AWIDE_PORT_DIR", str(tmp_path / "ports"))
    return tmp_path / "ports"


@given(st.integers(1024, 65535), st.integers(0, 64511))
def test_the_candidates_avoid_the_ephemeral_range(lo, width):
    hi = min(lo + width, 65535)
    c_lo, c_hi = candidate_range((lo, hi))
    assert ports.LOWEST <= c_lo <= c_hi <= 65535
    if c_hi - c_lo >= 1000 and (c_lo, c_hi) != (ports.LOWEST, 65535):
        assert c_hi < lo or c_lo > hi              # no overlap with the ephemeral range


def test_a_reserved_port_is_outside_the_ephemeral_range_and_bindable(port_dir):
    lo, hi = (int(x) for x in ports.EPHEMERAL.read_text().split()[:2])
    got = [reserve_port() for _ in range(20)]
    try:
        assert len(set(got)) == 20
        assert all(not lo <= p <= hi for p in got), (lo, hi, got)
        for p in got:                               # the listener it is for can bind it
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", p))
                s.listen()
    finally:
        release(got)
    assert not set(got) & ports.held()


def _hold_one(env_dir) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "AWIDE_PORT_DIR": str(env_dir)})
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def test_another_process_s_reservation_is_skipped_until_it_exits(port_dir):
    proc, theirs = _hold_one(port_dir)
    try:
        assert ports.claim(port_dir, theirs) is None      # the lock is theirs
        ours = ports.claim(port_dir, theirs + 1 if theirs < 65535 else theirs - 1)
        assert ours is not None                            # a neighbour is not
    finally:
        proc.communicate("\n", timeout=10)
    fd = ports.claim(port_dir, theirs)                    # their exit dropped the lock
    assert fd is not None
    os.close(fd)


def test_a_port_someone_listens_on_is_not_bindable(port_dir):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert not ports.bindable("127.0.0.1", s.getsockname()[1])
    free = reserve_port()
    try:
        assert ports.bindable("127.0.0.1", free)
    finally:
        release([free])


def test_reserve_skips_held_and_taken_ports(port_dir, monkeypatch):
    """With three candidates: one held by another process, one with a listener, one free:
    only the free one comes back, and a fourth call finds none."""
    proc, theirs = _hold_one(port_dir)
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen()
            taken = s.getsockname()[1]
            with socket.socket() as f:
                f.bind(("127.0.0.1", 0))
                free = f.getsockname()[1]
            pool = [theirs, taken, free]
            monkeypatch.setattr(ports, "candidate_range", lambda: (0, 2))
            cycle = itertools.cycle(pool)
            monkeypatch.setattr(ports.random, "randint", lambda a, b: next(cycle))
            got = reserve_port()
            assert got == free
            with pytest.raises(ports.NoFreePort, match="no free port"):
                reserve_port()
            release([got])
    finally:
        proc.communicate("\n", timeout=10)
