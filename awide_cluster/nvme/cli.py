"""nvme-cli 2.3, driven through a bounded runner with argv built only from validated values.

Every argument that carries data comes from an ``NvmeTarget`` (validated on construction),
``validate_nqn`` or ``validate_device_name``; options are passed as ``--name=value`` so that
no value can ever be read as an option. Nothing here builds a shell string.

A DH-HMAC-CHAP secret (``connect(..., dhchap_secret=)``; the controller's,
``dhchap_ctrl_secret=``) never goes on nvme-cli's argv (readable in /proc while it runs): it
goes in a 0600 JSON configuration file (``--config=``) that nvme-cli reads for a connect with
this host's ``hostid=``, which a secret therefore needs (docs/security.md, "NVMe-oF access").
nvme-cli's answers are scrubbed of it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Sequence

from awide_cluster.contract.target import (
    NvmeTarget,
    validate_device_name,
    validate_nqn,
    validate_traddr,
    validate_transport,
    validate_trsvcid,
)
from awide_cluster.nvme import parse
from awide_cluster.nvme.dhchap import DhchapSecret
from awide_cluster.nvme.errors import (
    AlreadyConnected,
    ConnectFailed,
    DisconnectFailed,
    NvmeCommandFailed,
)
from awide_cluster.nvme.runner import CommandRunner, Completed, RunnerError

log = logging.getLogger(__name__)


class NvmeCli:
    """Wraps the ``nvme`` program. Raises NvmeCommandFailed (and subclasses), NvmeParseError,
    InvalidTarget/InvalidDeviceName (before anything runs) and the runner's errors
    (CommandTimeout, ProgramNotFound, ...)."""

    def __init__(self, runner: CommandRunner, program: str = "nvme", timeout: float = 5.0) -> None:
        if not isinstance(program, str) or not program or program.startswith("-"):
            raise ValueError(f"bad nvme program name {program!r}")
        self._runner = runner
        self.program = program
        self.timeout = timeout

    async def _run(self, command: str, args: Sequence[str], timeout: float | None) -> Completed:
        argv = [self.program, command, *args]
        return await self._runner.run(argv, self.timeout if timeout is None else timeout)

    async def _checked(self, command: str, args: Sequence[str],
                       timeout: float | None) -> Completed:
        done = await self._run(command, args, timeout)
        if done.rc != 0:
            raise NvmeCommandFailed(command, done.rc, done.stderr or done.stdout)
        return done

    async def list_subsys(self, *, timeout: float | None = None) -> tuple[parse.Subsystem, ...]:
        done = await self._checked("list-subsys", ["--output-format=json"], timeout)
        return parse.parse_list_subsys(done.stdout)

    async def list(self, *, timeout: float | None = None) -> tuple[parse.ListedNamespace, ...]:
        done = await self._checked("list", ["--output-format=json"], timeout)
        return parse.parse_list(done.stdout)

    async def id_ctrl(self, device: str, *,
                      timeout: float | None = None) -> parse.ControllerIdentity:
        """``device``: nvmeN or nvmeNnM (with or without /dev/)."""
        name = validate_device_name(device)
        done = await self._checked("id-ctrl", [f"/dev/{name}", "--output-format=json"], timeout)
        return parse.parse_id_ctrl(done.stdout)

    async def id_ns(self, device: str, *, timeout: float | None = None) -> parse.NamespaceIdentity:
        """``device``: a namespace, nvmeNnM (with or without /dev/)."""
        name = validate_device_name(device, namespace=True)
        done = await self._checked("id-ns", [f"/dev/{name}", "--output-format=json"], timeout)
        return parse.parse_id_ns(done.stdout)

    async def connect(self, target: NvmeTarget, hostnqn: str | None = None, *,
                      ctrl_loss_tmo: int | None = None, reconnect_delay: int | None = None,
                      keep_alive_tmo: int | None = None,
                      dhchap_secret: DhchapSecret | None = None,
                      dhchap_ctrl_secret: DhchapSecret | None = None,
                      hostid: str | None = None,
                      timeout: float | None = None) -> str:
        """Connect and return the new controller's name (``nvmeN``).

        Raises AlreadyConnected (exit 1 with 'already connected'), ConnectFailed otherwise.
        ``dhchap_secret`` authenticates this host (DH-HMAC-CHAP); it needs ``hostnqn`` (the
        target holds one key per host NQN). ``dhchap_ctrl_secret`` makes the controller
        authenticate too (bidirectional; needs ``dhchap_secret``). A secret needs ``hostid``
        (this host's UUID): the secrets go to nvme-cli in a JSON configuration file (mode
        0600, in a private directory removed after the run, ``--config=``), never on its argv.
        """
        if not isinstance(target, NvmeTarget):
            raise TypeError("connect() takes a validated NvmeTarget, not "
                            f"{type(target).__name__}")
        args = [
            f"--transport={target.transport}",
            f"--traddr={target.traddr}",
            f"--trsvcid={target.trsvcid}",
            f"--nqn={target.subnqn}",
        ]
        if hostnqn is not None:
            args.append(f"--hostnqn={validate_nqn(hostnqn, 'hostnqn')}")
        if ctrl_loss_tmo is not None:
            args.append(f"--ctrl-loss-tmo={_small_int('ctrl_loss_tmo', ctrl_loss_tmo, -1)}")
        if reconnect_delay is not None:
            args.append(f"--reconnect-delay={_small_int('reconnect_delay', reconnect_delay, 1)}")
        if keep_alive_tmo is not None:
            args.append(f"--keep-alive-tmo={_small_int('keep_alive_tmo', keep_alive_tmo, 1)}")
        secret = ctrl_secret = ""
        if dhchap_ctrl_secret is not None and not isinstance(dhchap_ctrl_secret, DhchapSecret):
            raise TypeError("dhchap_ctrl_secret must be a DhchapSecret (read_secret_file)")
        if dhchap_ctrl_secret is not None and dhchap_secret is None:
            raise ValueError("a DH-HMAC-CHAP controller secret needs the host's secret")
        if dhchap_secret is not None:
            if not isinstance(dhchap_secret, DhchapSecret):
                raise TypeError("dhchap_secret must be a DhchapSecret (read_secret_file)")
            if hostnqn is None:
                raise ValueError("a DH-HMAC-CHAP secret needs the hostnqn it belongs to")
            if hostid is None:
                raise ValueError("a DH-HMAC-CHAP secret needs this host's hostid: nvme-cli "
                                 "reads it from a file only then (never from its argv)")
            secret = dhchap_secret.reveal()
            ctrl_secret = dhchap_ctrl_secret.reveal() if dhchap_ctrl_secret else ""
        with contextlib.ExitStack() as stack:
            if secret:
                # off argv: nvme-cli 2.3 takes the host's and the controller's keys from its
                # JSON configuration when the host entry's hostnqn and hostid are the
                # connect's (docs/security.md, "NVMe-oF access")
                assert hostnqn is not None and hostid is not None
                path = stack.enter_context(_key_config(
                    hostnqn, _hostid(hostid), target, secret, ctrl_secret))
                args += [f"--hostid={_hostid(hostid)}", f"--config={path}"]
            try:
                done = await self._run("connect", args, timeout)
            except RunnerError as e:
                raise _scrub(_scrub(e, secret), ctrl_secret) from None
        if done.rc != 0:
            text = f"{done.stderr}\n{done.stdout}"
            for hidden in (secret, ctrl_secret):
                if hidden:
                    text = text.replace(hidden, "***")
            if "already connected" in text.lower():
                raise AlreadyConnected("connect", done.rc, text)
            raise ConnectFailed("connect", done.rc, text)
        device = parse.parse_connect(done.stdout)
        log.info("nvme connect %s -> %s", target, device)
        return device

    async def discover(self, transport: str, traddr: str, trsvcid: int,
                       hostnqn: str | None = None, *,
                       timeout: float | None = None) -> parse.DiscoveryLog:
        """Read the discovery log of the discovery controller at ``traddr``:``trsvcid``
        (``nvme discover``, bounded; its answer is parsed as untrusted, at most
        ``parse.DISCOVERY_RECORDS_MAX`` entries). Connects nothing."""
        args = [f"--transport={validate_transport(transport)}",
                f"--traddr={validate_traddr(traddr)}",
                f"--trsvcid={validate_trsvcid(trsvcid)}"]
        if hostnqn is not None:
            args.append(f"--hostnqn={validate_nqn(hostnqn, 'hostnqn')}")
        done = await self._checked("discover", [*args, "--output-format=json"], timeout)
        return parse.parse_discover(done.stdout)

    async def disconnect(self, subnqn: str, *, timeout: float | None = None) -> int:
        """Disconnect every controller of ``subnqn``; return how many.

        Raises DisconnectFailed when nvme-cli says it disconnected 0 controllers (even if it
        exited 0), NvmeCommandFailed on a non-zero exit.
        """
        nqn = validate_nqn(subnqn)
        done = await self._checked("disconnect", [f"--nqn={nqn}"], timeout)
        count = parse.parse_disconnect(done.stdout + "\n" + done.stderr)
        if count == 0:
            raise DisconnectFailed("disconnect", done.rc,
                                   f"disconnected 0 controller(s) for {nqn}")
        log.info("nvme disconnect %s: %d controller(s)", nqn, count)
        return count


    async def disconnect_device(self, device: str, *, timeout: float | None = None) -> None:
        """Disconnect one controller (``nvmeN``); NvmeCommandFailed on a non-zero exit."""
        name = validate_device_name(device, namespace=False)
        await self._checked("disconnect", [f"--device={name}"], timeout)
        log.info("nvme disconnect %s", name)


def _hostid(value: str) -> str:
    """A host ID as nvme-cli takes it: a UUID (ValueError otherwise)."""
    try:
        return str(uuid.UUID(value))
    except (ValueError, AttributeError, TypeError):
        raise ValueError(f"hostid must be a UUID, got {value!r}") from None


@contextlib.contextmanager
def _key_config(hostnqn: str, hostid: str, target: NvmeTarget, secret: str,
                ctrl_secret: str) -> Iterator[str]:
    """libnvme's JSON configuration holding this connect's keys: a 0600 file in a 0700
    directory of its own, removed when the block ends."""
    port: dict[str, str] = {"transport": target.transport, "traddr": target.traddr,
                            "trsvcid": str(target.trsvcid)}
    if ctrl_secret:
        port["dhchap_ctrl_key"] = ctrl_secret
    doc = [{"hostnqn": hostnqn, "hostid": hostid, "dhchap_key": secret,
            "subsystems": [{"nqn": target.subnqn, "ports": [port]}]}]
    folder = tempfile.mkdtemp(prefix="awide-nvme-")
    path = os.path.join(folder, "config.json")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _scrub(e: RunnerError, secret: str) -> RunnerError:
    """The runner already shows a SecretArg as ***; this also covers any text it quoted."""
    if secret:
        e.args = tuple(a.replace(secret, "***") if isinstance(a, str) else a for a in e.args)
    return e


def _small_int(name: str, value: int, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 86400:
        raise ValueError(f"{name} must be an integer in {low}..86400, got {value!r}")
    return value
