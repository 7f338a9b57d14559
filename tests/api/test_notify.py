"""sd_notify against a real unix datagram socket (path and abstract namespace)."""

from __future__ import annotations

import os
import socket
import uuid

import pytest

from awide_cluster.api.notify import Notifier, NotifyError, format_message, socket_address


@pytest.fixture
def listener(tmp_path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify.sock")
    sock.bind(path)
    sock.settimeout(2.0)
    yield path, sock
    sock.close()


def test_ready_status_watchdog_stopping_reach_the_socket(listener):
    path, sock = listener
    n = Notifier({"NOTIFY_SOCKET": path})
    assert n.enabled
    assert n.ready(status="3 cards in service")
    assert sock.recv(4096) == b"READY=1\nSTATUS=3 cards in service"
    assert n.watchdog()
    assert sock.recv(4096) == b"WATCHDOG=1"
    assert n.status("leader; generation 7")
    assert sock.recv(4096) == b"STATUS=leader; generation 7"
    assert n.stopping()
    assert sock.recv(4096) == b"STOPPING=1"
    assert n.sent == 4 and n.failures == 0
    n.close()


def test_abstract_namespace_socket():
    name = f"awide-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    sock.settimeout(2.0)
    try:
        n = Notifier({"NOTIFY_SOCKET": "@" + name})
        assert n.ready()
        assert sock.recv(4096) == b"READY=1"
    finally:
        sock.close()


def test_unset_socket_is_a_noop():
    n = Notifier({})
    assert not n.enabled
    assert n.ready() is False and n.watchdog() is False
    assert n.sent == 0 and n.failures == 0


def test_gone_listener_is_counted_not_raised(tmp_path):
    n = Notifier({"NOTIFY_SOCKET": str(tmp_path / "nobody-listens.sock")})
    assert n.watchdog() is False
    assert n.failures == 1 and "FileNotFoundError" in n.last_error


def test_multiline_status_is_one_line(listener):
    path, sock = listener
    n = Notifier({"NOTIFY_SOCKET": path})
    n.status("etcd: timeout\nretrying")
    assert sock.recv(4096) == b"STATUS=etcd: timeout retrying"


def test_bad_values_are_refused():
    with pytest.raises(NotifyError):
        socket_address("relative/path")
    with pytest.raises(NotifyError):
        format_message({"ready": 1})
    assert socket_address("@x") == b"\0x"


def test_watchdog_interval_from_env():
    assert Notifier({}).watchdog_interval() is None
    assert Notifier({"WATCHDOG_USEC": "15000000"}).watchdog_interval() == 15.0
    mine = Notifier({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())})
    assert mine.watchdog_interval() == 2.0
    other = Notifier({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid() + 1)})
    assert other.watchdog_interval() is None
