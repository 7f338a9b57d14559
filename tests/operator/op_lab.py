"""Real daemons for operator tests: hosts with directory cards, their daemons in this
process on a real etcd, and the real ``awide-cluster`` command run as a subprocess (stdin a
pipe, or a terminal: a pty). Imported by name (the folder is not a package)."""

from __future__ import annotations

import asyncio
import os
import pty
import sys
from pathlib import Path

import yaml

from awide_cluster.config import daemon as daemon_config
from awide_cluster.contract import keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract.registry import CardEntry, Registry
from awide_cluster.daemon.service import Daemon
from awide_harness.presets import DirCards, config_dict
from tests.operator import op_state as state
from tests.timing import bound, wait_until

CLI = str(Path(sys.executable).with_name("awide-cluster"))
ROOT = Path(__file__).resolve().parents[2]
LOOKUP_VARIABLES = ("AWIDE_CONFIG", "AWIDE_ETCD_ENDPOINTS", "AWIDE_CLUSTER",
                    "AWIDE_DEFAULT_CONFIG")
TWO_HOSTS = {"h1": [("card0", "SN-h1-0"), ("card1", "SN-h1-1")],
             "h2": [("card0", "SN-h2-0"), ("card1", "SN-h2-1")]}



class Lab:
    """Storage hosts with directory cards (``layout``: host -> [(name, serial)]), their
    daemons in this process, and the daemon config of the first host in a file (what the
    operator commands find through $AWIDE_CONFIG, ``env``)."""

    def __init__(self, etcd, cluster: str, root: Path, layout=TWO_HOSTS) -> None:
        self.etcd, self.cluster = etcd, cluster
        self.configs = {h: config_dict(etcd.endpoints, cluster, h, [
            DirCards(root / h).card(name, serial) for name, serial in cards], hosts=layout)
            for h, cards in layout.items()}
        self.count = sum(len(c) for c in layout.values())
        self.file = root / "cluster.yaml"
        # the operator's commands read this file: their call bound is 1 s scaled by the tests'
        # time factor, not the daemons' tight 0.3 s (on a loaded machine a member's status
        # answer took longer than 0.3 s, and status rightly called the cluster unhealthy)
        first = self.configs[next(iter(layout))]
        self.file.write_text(yaml.safe_dump(
            {**first, "etcd": {**first["etcd"], "call_timeout": bound(1.0)}}))
        self.env = {"AWIDE_CONFIG": str(self.file)}
        self.daemons = {h: Daemon(daemon_config.parse(c, f"<{h}>"))
                        for h, c in self.configs.items()}
        self.store = state.store_for(etcd.endpoints, cluster)

    async def registry(self) -> Registry | None:
        kv = await self.store.get(keys.REGISTRY, timeout=2.0)
        return regdoc.decode(kv.value) if kv else None

    async def until(self, pred, what: str, timeout: float = 20.0):
        async def registry_if():
            reg = await self.registry()
            return reg if reg is not None and pred(reg) else None
        return await wait_until(registry_if, timeout, what)

    def card(self, reg: Registry, host: str, name: str) -> CardEntry | None:
        return next((c for c in reg.cards if c.host == host and c.name == name), None)

    async def intent(self, card_id: str):
        return await self.store.get(keys.intent(card_id), timeout=2.0)

    def environment(self) -> dict[str, str]:
        """This process's environment with only the lookup variables of ``env``."""
        env = {k: v for k, v in os.environ.items() if k not in LOOKUP_VARIABLES}
        # the command runs this checkout's code (an installed package may be another tree's)
        return {**env, "PYTHONPATH": str(ROOT), **self.env}

    async def cli(self, *args: str, tty_answers: list[tuple[str, str]] | None = None
                  ) -> tuple[int, str, str]:
        """Run the real command; with ``tty_answers`` its stdin is a terminal (a pty) and each
        answer is typed once its prompt appeared on stderr."""
        env = self.environment()
        if tty_answers is None:
            p = await asyncio.create_subprocess_exec(
                CLI, *args, env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(p.communicate(), 60)
            assert p.returncode is not None
            return p.returncode, out.decode(), err.decode()
        master, slave = pty.openpty()
        try:
            p = await asyncio.create_subprocess_exec(
                CLI, *args, env=env, stdin=slave, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE)
            os.close(slave)
            slave = -1
            err = b""
            assert p.stderr is not None
            for prompt, answer in tty_answers:
                while prompt.encode() not in err:
                    chunk = await asyncio.wait_for(p.stderr.read(4096), 60)
                    assert chunk, f"ended before asking {prompt!r}: {err.decode()}"
                    err += chunk
                os.write(master, answer.encode() + b"\n")
            out, rest = await asyncio.wait_for(p.communicate(), 60)
            assert p.returncode is not None
            return p.returncode, out.decode(), (err + rest).decode()
        finally:
            if slave >= 0:
                os.close(slave)
            os.close(master)

    async def __aenter__(self) -> Lab:
        for d in self.daemons.values():
            await d.start()
        await self.until(lambda r: len(r.cards) == self.count
                         and all(c.state == "in" for c in r.cards), "every card in")
        return self

    async def __aexit__(self, *exc) -> None:
        for d in self.daemons.values():
            await d.stop()
        await self.store.close()


