"""NVMe-oF host access from the gateway side: its host NQN and DH-HMAC-CHAP secrets (from
private files) reach ``nvme connect`` (the secrets in a private file with this host's ID,
never on any argv), a card whose export allows only listed hosts (the fake target refuses
others, as the kernel does) is reached only with them, and no secret shows anywhere: argv,
errors, logs, stats, the snapshot."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from awide_cluster.contract.health import Hysteresis
from awide_cluster.nvme.cli import NvmeCli
from awide_cluster.nvme.dhchap import BadSecret, parse_secret, read_secret_file
from awide_cluster.nvme.errors import ConnectFailed
from awide_cluster.nvme.runner import CommandTimeout, Runner
from awide_cluster.nvme.sysfs import Sysfs
from awide_gateway_cluster.config import ConfigError
from awide_gateway_cluster.connector import Connector
from awide_gateway_cluster.view import CardPath
from awide_harness.fakes import FakeNvmeWorld
from tests.gateway.support import (
    config,
    gateway,
    in_service,
    make_card,
    serve,
)
from tests.gateway.test_pure import cfg
from tests.timing import wait_until

HOSTNQN = "nqn.2024-01.io.awide:gpu1"
HOSTID = "fc5d7cf3-2da3-497c-9a5d-9660e3b8585c"
# made by nvme-cli 2.3: nvme gen-dhchap-key [-m 1] -n nqn.2024-01.io.awide:gw1
KEY = "DHHC-1:00:T50zLBgrqnvwGLqGoXa15nxG1ihDKwuDxyyRynTG/Hbyz/8e:"
KEY_SHA256 = "DHHC-1:01:D6Y25SFLqHT7vCOivYoq6EpNBp1feQbQd2bgVfKQR+l5WMFq:"
OTHER_KEY = "DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:"


def _secret_file(tmp_path: Path, text: str = KEY, mode: int = 0o600) -> Path:
    path = tmp_path / "gw.dhchap"
    path.write_text(text + "\n")
    path.chmod(mode)
    return path


# --- the secret file --------------------------------------------------------------------

@pytest.mark.parametrize("key", [KEY, KEY_SHA256, OTHER_KEY])
def test_secrets_made_by_nvme_cli_are_accepted_and_never_shown(key: str) -> None:
    s = parse_secret(key)
    assert s.reveal() == key
    assert key not in repr(s) and key not in str(s) and key not in f"{s!r} {s}"


@pytest.mark.parametrize("text,words", [
    ("hunter2", "not a DHHC-1"),
    (KEY.replace("DHHC-1:00", "DHHC-1:07"), "not a DHHC-1"),
    (KEY.replace("T50z", "T50y"), "CRC-32"),
    ("DHHC-1:00:" + "QUFB" * 11 + ":", "bytes"),
])
def test_bad_secrets_are_refused_without_showing_them(tmp_path: Path, text: str,
                                                      words: str) -> None:
    with pytest.raises(BadSecret) as err:
        read_secret_file(_secret_file(tmp_path, text))
    assert words in str(err.value) and str(tmp_path) in str(err.value)
    assert text not in str(err.value)


def test_a_secret_file_others_can_read_or_a_symlink_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BadSecret, match="mode 0640 lets group or others in"):
        read_secret_file(_secret_file(tmp_path, mode=0o640))
    link = tmp_path / "link"
    link.symlink_to(_secret_file(tmp_path))
    with pytest.raises(BadSecret, match="symlink"):
        read_secret_file(link)
    with pytest.raises(BadSecret, match="does not exist"):
        read_secret_file(tmp_path / "missing")


# --- the gateway config -----------------------------------------------------------------

def test_config_carries_the_host_nqn_and_the_secret_file(tmp_path: Path) -> None:
    path = _secret_file(tmp_path)
    c = cfg(nvme={"hostnqn": HOSTNQN, "hostid": HOSTID, "dhchap_secret_file": str(path)})
    assert c.nvme.hostnqn == HOSTNQN and c.nvme.dhchap_secret_file == path
    assert KEY not in repr(c) and KEY not in c.model_dump_json()


@pytest.mark.parametrize("nvme,field,words", [
    ({"dhchap_secret_file": "SECRET"}, "nvme.dhchap_secret_file", "not an absolute path"),
    ({"hostnqn": "gpu1"}, "nvme.hostnqn", "not an NQN"),
    ({"hostnqn": HOSTNQN, "dhchap_secret_file": "/nonexistent/gw.dhchap"},
     "nvme.dhchap_secret_file", "does not exist"),
    ({"hostnqn": HOSTNQN, "dhchap_secret_file": "MODE644"}, "nvme.dhchap_secret_file",
     "lets group or others in"),
    ({"dhchap_secret_file": "GOOD"}, "nvme", "needs hostnqn"),
])
def test_config_refusals_name_the_nvme_field(tmp_path: Path, nvme: dict, field: str,
                                             words: str) -> None:
    good = _secret_file(tmp_path)
    loose = tmp_path / "loose.dhchap"
    loose.write_text(KEY)
    loose.chmod(0o644)
    paths = {"GOOD": str(good), "MODE644": str(loose)}
    nvme = {"hostid": HOSTID, **{k: paths.get(v, v) for k, v in nvme.items()}}
    with pytest.raises(ConfigError) as err:
        cfg(nvme=nvme)
    assert err.value.field == field, err.value
    assert words in err.value.reason
    assert KEY not in str(err.value)


# --- nvme connect -------------------------------------------------------------------------

@pytest.fixture
def guarded(tmp_path: Path) -> tuple[FakeNvmeWorld, object]:
    """A world whose card target allows only HOSTNQN, with KEY."""
    world = FakeNvmeWorld(tmp_path / "host")
    card = make_card(1)
    serve(world, card)
    assert card.target is not None
    world.update_target(card.target.subnqn, allowed_hosts=[HOSTNQN],
                        dhchap_keys={HOSTNQN: KEY})
    return world, card


def _connector(world: FakeNvmeWorld, **kw: object) -> Connector:
    return Connector(NvmeCli(Runner(env=world.env())), Sysfs(world.sysfs_root),
                     command_timeout=5.0, **kw)  # type: ignore[arg-type]


async def test_connect_passes_the_host_nqn_and_the_secret(tmp_path: Path, guarded,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    world, card = guarded
    conn = _connector(world, hostnqn=HOSTNQN, hostid=HOSTID,
                      dhchap_secret_file=_secret_file(tmp_path))
    probe = await conn.probe(card, CardPath(card.id, health=Hysteresis()))
    assert probe.good and probe.verified, probe     # the fake target checked the key
    (connect,) = [c for c in world.calls() if c[0] == "connect"]
    assert f"--hostnqn={HOSTNQN}" in connect and f"--hostid={HOSTID}" in connect
    assert KEY not in json.dumps(world.calls()) and not any("dhchap" in a for a in connect)
    assert KEY not in caplog.text and KEY not in repr(probe)


async def test_connect_passes_the_controller_secret_for_bidirectional_authentication(
        tmp_path: Path, guarded, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    world, card = guarded
    ctrl = tmp_path / "ctrl"
    ctrl.mkdir()
    conn = _connector(world, hostnqn=HOSTNQN, hostid=HOSTID,
                      dhchap_secret_file=_secret_file(tmp_path),
                      dhchap_ctrl_secret_file=_secret_file(ctrl, OTHER_KEY))
    # a target that holds another controller key (or none) cannot prove it: refused
    probe = await conn.probe(card, CardPath(card.id, health=Hysteresis()))
    assert not probe.good and "connect failed" in probe.note, probe
    world.update_target(card.target.subnqn, dhchap_ctrl_keys={HOSTNQN: OTHER_KEY})
    probe = await conn.probe(card, CardPath(card.id, health=Hysteresis()))
    assert probe.good and probe.verified, probe     # the fake target proved OTHER_KEY
    calls = json.dumps(world.calls())
    assert KEY not in calls and OTHER_KEY not in calls and "dhchap" not in calls
    assert OTHER_KEY not in caplog.text and OTHER_KEY not in repr(probe)
    c = cfg(nvme={"hostnqn": HOSTNQN, "hostid": HOSTID,
                  "dhchap_secret_file": str(_secret_file(tmp_path)),
                  "dhchap_ctrl_secret_file": str(ctrl / "gw.dhchap")})
    assert c.nvme.dhchap_ctrl_secret_file == ctrl / "gw.dhchap"
    with pytest.raises(ConfigError) as err:
        cfg(nvme={"hostnqn": HOSTNQN, "hostid": HOSTID,
                  "dhchap_ctrl_secret_file": str(ctrl / "gw.dhchap")})
    assert "needs dhchap_secret_file" in err.value.reason


@pytest.mark.parametrize("kw,secret", [
    ({}, None),                                              # nvme-cli's default host NQN
    ({"hostnqn": "nqn.2024-01.io.awide:other"}, KEY),        # not on the list
    ({"hostnqn": HOSTNQN}, None),                            # listed, no key
    ({"hostnqn": HOSTNQN}, OTHER_KEY),                       # listed, wrong key
])
async def test_a_host_the_export_does_not_allow_is_not_connected(
        tmp_path: Path, guarded, kw: dict, secret: str | None,
        caplog: pytest.LogCaptureFixture) -> None:
    world, card = guarded
    if secret is not None:
        kw = {**kw, "hostid": HOSTID, "dhchap_secret_file": _secret_file(tmp_path, secret)}
    probe = await _connector(world, **kw).probe(card, CardPath(card.id, health=Hysteresis()))
    assert not probe.good and "connect failed" in probe.note, probe
    assert Sysfs(world.sysfs_root).controllers() == ()
    assert KEY not in caplog.text + probe.note and OTHER_KEY not in caplog.text + probe.note


async def test_a_secret_file_gone_bad_stops_the_connect_before_nvme_runs(tmp_path: Path,
                                                                        guarded) -> None:
    world, card = guarded
    path = _secret_file(tmp_path)
    conn = _connector(world, hostnqn=HOSTNQN, hostid=HOSTID, dhchap_secret_file=path)
    path.chmod(0o644)
    probe = await conn.probe(card, CardPath(card.id, health=Hysteresis()))
    assert "connect not tried" in probe.note and "lets group or others in" in probe.note
    assert world.calls() == []


async def test_errors_of_a_connect_with_a_secret_never_show_it(tmp_path: Path, guarded) -> None:
    world, card = guarded
    cli = NvmeCli(Runner(env=world.env()))
    secret = read_secret_file(_secret_file(tmp_path))
    world.fault("connect", "hang", times=1)
    with pytest.raises(CommandTimeout) as hung:
        await cli.connect(card.target, HOSTNQN, dhchap_secret=secret, hostid=HOSTID,
                          timeout=0.5)
    assert KEY not in str(hung.value) and KEY not in repr(hung.value.argv)
    assert f"--hostid={HOSTID}" in hung.value.argv
    world.fault("connect", "fail", times=1, rc=1, stderr=f"bad option dhchap_secret={KEY}\n")
    with pytest.raises(ConnectFailed) as failed:
        await cli.connect(card.target, HOSTNQN, dhchap_secret=secret, hostid=HOSTID)
    assert KEY not in str(failed.value) and "dhchap_secret=***" in str(failed.value)
    with pytest.raises(ValueError, match="needs the hostnqn"):
        await cli.connect(card.target, None, dhchap_secret=secret, hostid=HOSTID)


# --- the gateway, on a real etcd ------------------------------------------------------------

async def test_a_gateway_with_its_host_nqn_and_secret_serves_a_guarded_card(
        etcd, leader, cluster_name, tmp_path: Path, guarded,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    world, card = guarded
    await leader.publish([card])
    path = _secret_file(tmp_path)
    hostid_file = tmp_path / "hostid"       # nvme-cli's /etc/nvme/hostid, here
    hostid_file.write_text(HOSTID + "\n")
    gw = gateway(config(cluster_name, etcd.endpoints, world,
                        nvme={"hostnqn": HOSTNQN, "dhchap_secret_file": str(path),
                              "hostid_file": str(hostid_file)}), world)
    await gw.start()
    try:
        await wait_until(lambda: in_service(gw, card.id), what="the guarded card in service")
        shown = json.dumps([repr(gw.snapshot()), repr(gw.stats()), repr(gw.config)])
    finally:
        await gw.stop()
    (connect,) = [c for c in world.calls() if c[0] == "connect"]
    assert f"--hostid={HOSTID}" in connect and KEY not in json.dumps(world.calls())
    assert KEY not in shown and KEY not in caplog.text
    assert os.stat(path).st_mode & 0o777 == 0o600


# --- NVMe-oF timeouts -----------------------------------------------------------------------

async def test_connect_carries_the_fabric_timeouts_from_config(tmp_path: Path, guarded) -> None:
    world, card = guarded
    c = cfg(nvme={"hostnqn": HOSTNQN, "hostid": HOSTID,
                  "dhchap_secret_file": str(_secret_file(tmp_path)), "ctrl_loss_tmo": 17,
                  "reconnect_delay": 2, "fast_io_fail_tmo": 4, "keep_alive_tmo": 5})
    conn = _connector(world, hostnqn=HOSTNQN, hostid=c.nvme.hostid,
                      dhchap_secret_file=c.nvme.dhchap_secret_file,
                      timeouts=c.nvme.fabric_timeouts)
    probe = await conn.probe(card, CardPath(card.id, health=Hysteresis()))
    assert probe.good and probe.verified, probe
    (connect,) = [c for c in world.calls() if c[0] == "connect"]
    assert {"--ctrl-loss-tmo=17", "--reconnect-delay=2", "--keep-alive-tmo=5"} <= set(connect)
    # nvme-cli 2.3 has no --fast_io_fail_tmo: the controller's sysfs attribute carries it
    assert not any("fast_io_fail" in a for a in connect)
    (ctrl,) = Sysfs(world.sysfs_root).controllers()
    attr = Sysfs(world.sysfs_root).class_dir / ctrl.name / "fast_io_fail_tmo"
    assert attr.read_text() == "4\n"


def test_fabric_timeout_defaults_and_refusals() -> None:
    t = cfg().nvme.fabric_timeouts
    assert (t.ctrl_loss_tmo, t.reconnect_delay, t.fast_io_fail_tmo, t.keep_alive_tmo) == (
        60, 1, 1, 2)
    with pytest.raises(ConfigError) as err:
        cfg(nvme={"ctrl_loss_tmo": 5, "fast_io_fail_tmo": 5})
    assert err.value.field == "nvme" and "fast_io_fail_tmo (5 s) must be shorter" in str(err.value)
    with pytest.raises(ConfigError) as err:
        cfg(nvme={"ctrl_loss_tmo": 3, "reconnect_delay": 3})
    assert "reconnect_delay (3 s) must be shorter" in str(err.value)


# --- secrets off nvme-cli's command line ----------------------------------------------------


async def test_with_a_host_id_the_secrets_reach_nvme_cli_in_a_private_file(
        tmp_path: Path, guarded) -> None:
    """nvme-cli 2.3 takes both keys from ``--config`` when the file's host entry has the
    connect's hostnqn and hostid (measured: docs/security.md): none is on any argv, and the
    file is gone after the run."""
    world, card = guarded
    ctrl = tmp_path / "ctrl"
    ctrl.mkdir()
    c = cfg(nvme={"hostnqn": HOSTNQN, "hostid": HOSTID.upper(),
                  "dhchap_secret_file": str(_secret_file(tmp_path)),
                  "dhchap_ctrl_secret_file": str(_secret_file(ctrl, OTHER_KEY))})
    assert c.nvme.hostid == HOSTID
    world.update_target(card.target.subnqn, dhchap_ctrl_keys={HOSTNQN: OTHER_KEY})
    conn = _connector(world, hostnqn=HOSTNQN, hostid=c.nvme.hostid,
                      dhchap_secret_file=c.nvme.dhchap_secret_file,
                      dhchap_ctrl_secret_file=c.nvme.dhchap_ctrl_secret_file)
    probe = await conn.probe(card, CardPath(card.id, health=Hysteresis()))
    assert probe.good and probe.verified, probe     # the fake target checked the key
    (connect,) = [c for c in world.calls() if c[0] == "connect"]
    assert KEY not in json.dumps(world.calls()) and OTHER_KEY not in json.dumps(world.calls())
    assert f"--hostid={HOSTID}" in connect
    (config_arg,) = [a for a in connect if a.startswith("--config=")]
    assert not Path(config_arg.removeprefix("--config=")).exists()
    with pytest.raises(ConfigError):
        cfg(nvme={"hostid": "not-a-uuid"})


async def test_a_wrong_key_in_the_file_is_refused_like_one_on_argv(tmp_path: Path,
                                                                   guarded) -> None:
    world, card = guarded
    conn = _connector(world, hostnqn=HOSTNQN, hostid=HOSTID,
                      dhchap_secret_file=_secret_file(tmp_path, OTHER_KEY))
    probe = await conn.probe(card, CardPath(card.id, health=Hysteresis()))
    assert not probe.verified and "connect failed" in probe.note, probe


def test_the_host_id_comes_from_nvme_clis_file_when_the_config_gives_none(
        tmp_path: Path) -> None:
    """With a secret and no ``nvme.hostid``, the host ID is read from ``nvme.hostid_file``
    (default /etc/nvme/hostid, nvme-cli's); none there is a config error naming what to set,
    never a connect with the secret on argv."""
    secret = str(_secret_file(tmp_path))
    hostid_file = tmp_path / "hostid"
    hostid_file.write_text(HOSTID.upper() + "\n")
    c = cfg(nvme={"hostnqn": HOSTNQN, "dhchap_secret_file": secret,
                  "hostid_file": str(hostid_file)})
    assert c.nvme.hostid == HOSTID
    explicit = "0b0c7c55-1b0e-4f59-8a52-4a1f4b7e5e0e"        # the config's own wins
    assert cfg(nvme={"hostnqn": HOSTNQN, "dhchap_secret_file": secret, "hostid": explicit,
                     "hostid_file": str(hostid_file)}).nvme.hostid == explicit
    assert cfg(nvme={"hostid_file": str(tmp_path / "none")}).nvme.hostid is None  # no secret
    assert cfg().nvme.hostid_file == Path("/etc/nvme/hostid")
    bad = tmp_path / "bad"
    bad.write_text("not a uuid\n")
    for path, words in ((tmp_path / "missing", "does not exist"), (bad, "does not hold a UUID")):
        with pytest.raises(ConfigError) as err:
            cfg(nvme={"hostnqn": HOSTNQN, "dhchap_secret_file": secret,
                      "hostid_file": str(path)})
        assert err.value.field == "nvme", err.value
        assert "set nvme.hostid" in err.value.reason and str(path) in err.value.reason
        assert words in err.value.reason and KEY not in str(err.value)


async def test_a_secret_without_a_host_id_is_refused_before_nvme_cli_runs(
        tmp_path: Path, guarded) -> None:
    world, card = guarded
    secret = read_secret_file(_secret_file(tmp_path))
    with pytest.raises(ValueError, match="needs this host's hostid"):
        await NvmeCli(Runner(env=world.env())).connect(card.target, HOSTNQN,
                                                       dhchap_secret=secret)
    with pytest.raises(ValueError, match="needs this host's hostid"):
        _connector(world, hostnqn=HOSTNQN, dhchap_secret_file=_secret_file(tmp_path))
    assert world.calls() == []
