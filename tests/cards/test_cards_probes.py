"""Probes: real sockets, a real HTTP server, fake systemctl/commands on the runner's PATH."""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from awide_cluster.cards.model import LocalCard, ProbeResult
from awide_cluster.cards.probes import (
    PROBE_FILE,
    PROBE_PAYLOAD,
    check_device,
    check_identity,
    probe_file,
    probe_listener,
    probe_store,
    probe_writable,
    space_left,
)
from awide_cluster.cards.spec import StoreProbeSpec
from awide_cluster.cards.units import ACTIVE_STATES, UnitStates, parse_is_active
from awide_cluster.contract.target import NvmeTarget
from awide_cluster.nvme.runner import Completed, Runner
from awide_harness.fakes import install_python_program
from awide_harness.ports import reserve_port
from tests.timing import bound

# systemctl is-active's shape: one state per unit asked, in order; exit 0 when any is active.
# Each start appends its units to FAKE_UNITS_LOG. "short" prints nothing for its unit.
FAKE_SYSTEMCTL = """
import json, os, sys, time
units = json.load(open(os.environ["FAKE_UNITS"]))
assert sys.argv[1:3] == ["is-active", "--"] and len(sys.argv) > 3, sys.argv
asked = sys.argv[3:]
with open(os.environ["FAKE_UNITS_LOG"], "a") as log:
    log.write(" ".join(asked) + "\\n")
states = [units.get(u, "inactive") for u in asked]
if "hang" in states:
    time.sleep(3600)
for s in states:
    if s != "short":
        print(s)
sys.exit(0 if "active" in states else 3)
"""


@pytest.fixture
def units(tmp_path):
    bin_dir = tmp_path / "bin"
    install_python_program(bin_dir, "systemctl", FAKE_SYSTEMCTL)
    install_python_program(bin_dir, "store-check",
                           "import sys, time\n"
                           "if sys.argv[1] == 'hang': time.sleep(3600)\n"
                           "print('store says', sys.argv[1], file=sys.stderr)\n"
                           "sys.exit(int(sys.argv[1]))\n")
    path = tmp_path / "units.json"
    path.write_text(json.dumps({"store-a.service": "active", "store-b.service": "failed",
                                "store-h.service": "hang"}))
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "FAKE_UNITS": str(path), "FAKE_UNITS_LOG": str(tmp_path / "asked.log")}
    return Runner(env=env)


@pytest.fixture
async def http_url():
    async def ok(_):
        return web.Response(text="ok")

    async def bad(_):
        return web.Response(status=500)

    release = asyncio.Event()

    async def slow(_):
        await asyncio.wait_for(release.wait(), 10)
        return web.Response(text="late")

    async def moved(_):
        raise web.HTTPFound("/ok")

    app = web.Application()
    app.add_routes([web.get("/ok", ok), web.get("/bad", bad), web.get("/slow", slow),
                    web.get("/moved", moved)])
    runner = web.AppRunner(app)
    await runner.setup()
    port = reserve_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    yield f"http://127.0.0.1:{port}"
    release.set()
    await runner.cleanup()


clock = time.monotonic


def _ok(r: ProbeResult, probe: str, *words: str) -> None:
    assert r.probe == probe and r.ok, r.reason
    for w in words:
        assert w in r.reason
    assert r.elapsed >= 0


def _bad(r: ProbeResult, probe: str, *words: str) -> None:
    assert r.probe == probe and not r.ok
    for w in words:
        assert w in r.reason, r.reason


# ------------------------------------------------------------------ store

async def test_systemd_unit_states(units):
    _ok(await probe_store(StoreProbeSpec(systemd_unit="store-a.service"), units, 5, clock),
        "store", "store-a.service is active")
    _bad(await probe_store(StoreProbeSpec(systemd_unit="store-b.service"), units, 5, clock),
         "store", "store-b.service is failed")
    _bad(await probe_store(StoreProbeSpec(systemd_unit="store-x.service"), units, 5, clock),
         "store", "inactive")


async def test_systemd_unit_hang_is_bounded(units):
    start = time.monotonic()
    r = await probe_store(StoreProbeSpec(systemd_unit="store-h.service"), units, 0.5, clock)
    _bad(r, "store", "0.5 s")
    assert time.monotonic() - start < bound(5)     # generous bound


async def test_a_turn_s_units_are_asked_with_one_systemctl(units, tmp_path):
    """Every store unit asked in one loop iteration (the daemon observes its cards together)
    goes to one systemctl; each card gets its own unit's state, a unit asked twice once."""
    states = UnitStates(units)
    specs = ["store-a.service", "store-b.service", "store-x.service", "store-a.service"]
    got = await asyncio.gather(*(probe_store(StoreProbeSpec(systemd_unit=u), units, 5, clock,
                                             units=states) for u in specs))
    assert states.calls == 1
    asked = (tmp_path / "asked.log").read_text().splitlines()
    assert asked == ["store-a.service store-b.service store-x.service"]
    _ok(got[0], "store", "store-a.service is active")
    _bad(got[1], "store", "store-b.service is failed")
    _bad(got[2], "store", "store-x.service is inactive")
    _ok(got[3], "store", "store-a.service is active")
    # the next turn asks again: nothing is cached across turns
    _ok(await probe_store(StoreProbeSpec(systemd_unit="store-a.service"), units, 5, clock,
                          units=states), "store", "active")
    assert states.calls == 2


async def test_a_short_answer_fails_every_unit_of_the_call_by_name(units, tmp_path):
    path = tmp_path / "units.json"
    path.write_text(json.dumps({"store-a.service": "active", "store-s.service": "short"}))
    states = UnitStates(units)
    a, s = await asyncio.gather(
        probe_store(StoreProbeSpec(systemd_unit="store-a.service"), units, 5, clock,
                    units=states),
        probe_store(StoreProbeSpec(systemd_unit="store-s.service"), units, 5, clock,
                    units=states))
    _bad(a, "store", "store-a.service", "printed 1 line(s) for 2 unit(s)")
    _bad(s, "store", "store-s.service", "printed 1 line(s) for 2 unit(s)")


async def test_a_caller_giving_up_leaves_the_others_their_answer(units):
    states = UnitStates(units)
    slow = asyncio.create_task(states.ask("store-a.service", 5))
    other = asyncio.create_task(states.ask("store-b.service", 5))
    await asyncio.sleep(0)          # both asked in this iteration: one call for the two
    slow.cancel()
    got = await other
    assert not got.active and "store-b.service is failed" in got.reason
    assert states.calls == 1 and slow.cancelled()


async def test_a_hung_systemctl_fails_every_unit_of_its_turn_within_the_bound(units):
    states = UnitStates(units)
    start = time.monotonic()
    h, a = await asyncio.gather(
        probe_store(StoreProbeSpec(systemd_unit="store-h.service"), units, 0.5, clock,
                    units=states),
        probe_store(StoreProbeSpec(systemd_unit="store-a.service"), units, 0.5, clock,
                    units=states))
    _bad(h, "store", "0.5 s")
    _bad(a, "store", "0.5 s")
    assert time.monotonic() - start < bound(5)


@given(st.lists(st.sampled_from(["active", "reloading", "refreshing", "inactive", "failed",
                                 "activating", "", "x" * 80, "active\x1b[0m"]),
                min_size=1, max_size=8))
def test_judge_maps_each_line_to_its_unit(lines):
    names = tuple(f"u{i}.service" for i in range(len(lines)))
    got = parse_is_active(names, Completed(0, "\n".join(lines) + "\n", ""), "systemctl")
    assert list(got) == list(names)
    for name, line in zip(names, lines, strict=True):
        assert got[name].active == (line in ACTIVE_STATES)
        assert name in got[name].reason and len(got[name].reason) < 200
    short = parse_is_active(names, Completed(3, "\n".join(lines[:-1]), "Failed to connect to bus"),
                  "systemctl")
    assert not any(u.active for u in short.values())
    assert all("Failed to connect to bus" in u.reason for u in short.values())


async def test_systemctl_missing(tmp_path):
    r = await probe_store(StoreProbeSpec(systemd_unit="a.service"),
                          Runner(env={"PATH": str(tmp_path)}), 5, clock)
    _bad(r, "store", "systemctl not found")


async def test_command_probe(units):
    _ok(await probe_store(StoreProbeSpec(command=("store-check", "0")), units, 5, clock),
        "store", "exited 0")
    _bad(await probe_store(StoreProbeSpec(command=("store-check", "2")), units, 5, clock),
         "store", "exited 2", "store says 2")
    _bad(await probe_store(StoreProbeSpec(command=("store-check", "hang")), units, 0.5, clock),
         "store", "0.5 s")
    _bad(await probe_store(StoreProbeSpec(command=("no-such-program",)), units, 5, clock),
         "store", "not found")


async def test_http_probe(http_url):
    _ok(await probe_store(StoreProbeSpec(http=f"{http_url}/ok"), None, 5, clock),
        "store", "answered 200")
    _bad(await probe_store(StoreProbeSpec(http=f"{http_url}/bad"), None, 5, clock),
         "store", "answered 500")
    _bad(await probe_store(StoreProbeSpec(http=f"{http_url}/moved"), None, 5, clock),
         "store", "answered 302")
    _bad(await probe_store(StoreProbeSpec(http=f"{http_url}/slow"), None, 0.5, clock),
         "store", "0.5 s")
    port = reserve_port()
    _bad(await probe_store(StoreProbeSpec(http=f"http://127.0.0.1:{port}/"), None, 5, clock),
         "store", f"127.0.0.1:{port}")


async def test_tcp_probe(listener):
    _ok(await probe_store(StoreProbeSpec(tcp=f"127.0.0.1:{listener}"), None, 5, clock),
        "store", "accepts connections")
    port = reserve_port()
    _bad(await probe_store(StoreProbeSpec(tcp=f"127.0.0.1:{port}"), None, 5, clock),
         "store", "refused")
    # a name goes through asyncio's resolution and connection (an IP literal does not)
    _ok(await probe_store(StoreProbeSpec(tcp=f"localhost:{listener}"), None, 5, clock),
        "store", f"localhost:{listener} accepts connections")
    _bad(await probe_store(StoreProbeSpec(tcp=f"localhost:{port}"), None, 5, clock),
         "store", f"localhost:{port}", "refused")


async def test_tcp_probe_ipv6_literal():
    try:
        server = await asyncio.start_server(lambda r, w: w.close(), "::1", 0)
    except OSError:
        pytest.skip("no IPv6 loopback here")
    port = server.sockets[0].getsockname()[1]
    try:
        _ok(await probe_store(StoreProbeSpec(tcp=f"[::1]:{port}"), None, 5, clock),
            "store", f"[::1]:{port} accepts connections")
    finally:
        server.close()
        await server.wait_closed()
    _bad(await probe_store(StoreProbeSpec(tcp=f"[::1]:{port}"), None, 5, clock),
         "store", f"[::1]:{port}", "refused")


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_tcp_probe_leaves_no_socket_open(listener):
    refused = reserve_port()
    before = _open_fds()
    for _ in range(20):
        assert (await probe_store(StoreProbeSpec(tcp=f"127.0.0.1:{listener}"), None, 5,
                                  clock)).ok
        assert not (await probe_store(StoreProbeSpec(tcp=f"127.0.0.1:{refused}"), None, 5,
                                      clock)).ok
        # cut by its bound mid-connect (TEST-NET-1 is never routed)
        assert not (await probe_store(StoreProbeSpec(tcp="192.0.2.1:4420"), None, 0.01,
                                      clock)).ok
    assert _open_fds() <= before


# ------------------------------------------------------------------ listener

async def test_listener_probe(listener):
    t = NvmeTarget("tcp", "127.0.0.1", listener, "nqn.2024-01.io.awide:sub1")
    _ok(await probe_listener(t, 5, clock), "listener", f"127.0.0.1:{listener}")
    t = NvmeTarget("tcp", "127.0.0.1", reserve_port(), "nqn.2024-01.io.awide:sub1")
    _bad(await probe_listener(t, 5, clock), "listener", "NVMe-oF listener", "refused")


async def test_listener_unroutable_is_bounded():
    # TEST-NET-1 is never routed: the connect either fails at once or is cut by the bound
    t = NvmeTarget("tcp", "192.0.2.1", 4420, "nqn.2024-01.io.awide:sub1")
    start = time.monotonic()
    r = await probe_listener(t, 0.3, clock)
    assert not r.ok and time.monotonic() - start < bound(5)


# ------------------------------------------------------------------ writable

async def test_writable(tmp_path):
    _ok(await probe_writable(tmp_path, 5, clock), "writable", "writable")
    mine = tmp_path / PROBE_FILE.format(uid=os.geteuid())
    assert [p.name for p in tmp_path.iterdir()] == [mine.name]     # one probe file, it stays
    assert mine.read_bytes() == PROBE_PAYLOAD and mine.stat().st_mode & 0o777 == 0o600
    inode = mine.stat().st_ino
    _ok(await probe_writable(tmp_path, 5, clock), "writable", "writable")
    assert mine.stat().st_ino == inode and len(list(tmp_path.iterdir())) == 1  # overwritten
    assert probe_file(str(tmp_path)) == str(mine)
    _bad(await probe_writable(tmp_path / "absent", 5, clock), "writable", "not writable")
    (tmp_path / "file").write_text("x")
    _bad(await probe_writable(tmp_path / "file", 5, clock), "writable", "not writable")


async def test_writable_refuses_a_symlink_at_the_probe_name(tmp_path):
    precious = tmp_path / "precious"
    precious.write_text("keep me")
    card = tmp_path / "card"
    card.mkdir()
    name = probe_file(str(card))
    os.symlink(precious, name)
    _bad(await probe_writable(card, 5, clock), "writable", "not writable", name,
         "symbolic link")
    assert precious.read_text() == "keep me"
    os.unlink(name)
    os.symlink(tmp_path / "nowhere", name)          # a dangling one is not followed either
    _bad(await probe_writable(card, 5, clock), "writable", name, "symbolic link")
    assert not (tmp_path / "nowhere").exists()
    os.symlink(tmp_path / "loop", tmp_path / "loop")   # a loop in the path itself: not the file
    _bad(await probe_writable(tmp_path / "loop", 5, clock), "writable", "not writable")
    r = await probe_writable(tmp_path / "loop", 5, clock)
    assert "symbolic link (refused)" not in r.reason, r.reason


async def test_writable_refuses_a_hardlinked_probe_file(tmp_path):
    card = tmp_path / "card"
    card.mkdir()
    _ok(await probe_writable(card, 5, clock), "writable", "writable")
    name = probe_file(str(card))
    with open(name, "wb") as f:
        f.write(b"someone else's bytes")
    os.link(name, tmp_path / "elsewhere")
    _bad(await probe_writable(card, 5, clock), "writable", name, "2 hard links")
    assert (tmp_path / "elsewhere").read_bytes() == b"someone else's bytes"
    os.unlink(tmp_path / "elsewhere")
    _ok(await probe_writable(card, 5, clock), "writable", "writable")


async def test_writable_refuses_what_is_not_a_regular_file_at_once(tmp_path):
    card = tmp_path / "card"
    card.mkdir()
    name = probe_file(str(card))
    os.mkfifo(name)                 # no reader: a plain open for writing would block
    start = time.monotonic()
    _bad(await probe_writable(card, 5, clock), "writable", name, "not a regular file")
    assert time.monotonic() - start < bound(1.0)
    os.unlink(name)
    os.mkdir(name)
    _bad(await probe_writable(card, 5, clock), "writable", name, "not a regular file")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
async def test_writable_refuses_a_probe_file_of_another_owner(tmp_path):
    _ok(await probe_writable(tmp_path, 5, clock), "writable", "writable")
    name = probe_file(str(tmp_path))
    os.chown(name, 4242, 4242)
    _bad(await probe_writable(tmp_path, 5, clock), "writable", name, "owned by uid 4242")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in a directory without write "
                    "permission")
async def test_writable_fails_in_a_directory_this_user_cannot_write(tmp_path):
    card = tmp_path / "card"
    card.mkdir()
    _ok(await probe_writable(card, 5, clock), "writable", "writable")
    card.chmod(0o555)               # the probe file is still writable; new files are not
    try:
        _bad(await probe_writable(card, 5, clock), "writable", "not writable",
             "cannot create files")
    finally:
        card.chmod(0o755)


def _fs(bavail: int, files: int, favail: int) -> os.statvfs_result:
    return os.statvfs_result((4096, 4096, 1000, bavail + 5, bavail, files, favail, favail,
                              0, 255))


def test_space_left():
    assert space_left(_fs(10, 100, 5)) == ""
    assert space_left(_fs(0, 100, 5)) == "file system full (no block free)"
    assert space_left(_fs(10, 100, 0)) == "file system full (no inode free)"
    assert space_left(_fs(10, 0, 0)) == ""          # a file system that counts no inodes
    assert space_left(os.statvfs(os.getcwd())) == ""


# ------------------------------------------------------------------ pure checks

CARD = LocalCard(name="card0", kind="nvme", serial="SN1", model="M",
                 identity="nguid:0102030405060708090a0b0c0d0e0f10", device="nvme3n1",
                 controller_state="live", target=None)


def test_check_device():
    assert check_device(CARD).ok
    from dataclasses import replace
    r = check_device(replace(CARD, controller_state="connecting"))
    assert not r.ok and "connecting" in r.reason
    r = check_device(replace(CARD, device=None), namespace_missing=True, controller="nvme3")
    assert not r.ok and "nvme3 shows no namespace" in r.reason


def test_check_identity():
    from dataclasses import replace
    assert check_identity(CARD, None).ok
    assert "first seen" in check_identity(CARD, None).reason
    assert check_identity(CARD, CARD.identity).ok
    r = check_identity(CARD, "nguid:" + "ff" * 16)
    assert not r.ok and "identity changed" in r.reason and "not the same card" in r.reason
    r = check_identity(replace(CARD, identity=None), CARD.identity, "no NGUID")
    assert not r.ok and "no NGUID" in r.reason
    assert not check_identity(replace(CARD, identity=None), None).ok
