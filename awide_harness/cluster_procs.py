"""Starting the embedded cluster's processes: store services, daemons, gateways."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import IO, Any

import yaml

from awide_cluster.access.plan import gateway_user, host_user
from awide_cluster.cards.directory import read_label, write_label
from awide_cluster.contract import registry as regdoc
from awide_harness.cluster_base import Card, ClusterBase, GatewayState, fill
from awide_harness.fakes import FakeNs, FakeNvmeWorld, FakeSysfs
from awide_harness.procs import Proc
from awide_harness.spec import (
    DIR_MODEL,
    METRICS_PORT_NETNS,
    NVME_MODEL,
    NVME_PORT_NETNS,
    CardPlan,
    card_serial,
    card_spec,
    daemon_config,
    gateway_config,
    nvme_card_spec,
    nvme_nguid,
    nvme_nqn,
    nvme_serial,
)
from awide_harness.views import GatewayFeed
from awide_harness.waits import WaitTimeout, wait_until_sync


class ClusterProcs(ClusterBase):
    """Spawns the cluster's processes and writes their configs."""

    def _new_card(self, host: str, plan: CardPlan) -> Card:
        key = f"{host}/{plan.name}"
        path = self.work_dir / "cards" / host / plan.name
        path.mkdir(parents=True, exist_ok=True)
        if plan.kind == "nvme":
            card = self._nvme_card(key, host, plan.name, path)
        else:
            serial = card_serial(key)
            u, alt_u = str(uuid.uuid4()), str(uuid.uuid4())
            label = write_label(path, serial, DIR_MODEL, u, force=True)
            assert read_label(path) == label
            alt_serial = serial + "-ALT"
            card = Card(key, host, plan.name, "dir", path, self._reserve_port(), "127.0.0.1",
                        id=regdoc.card_id(label.serial, label.model, label.identity),
                        serial=serial, uuid=u, alt_serial=alt_serial, alt_uuid=alt_u,
                        alt_id=regdoc.card_id(alt_serial, DIR_MODEL, f"label:{alt_u}"))
        self._cards[key] = card
        self._hosts[host].cards.append(key)
        self._spawn_store(card)
        return card

    def _nvme_card(self, key: str, host: str, name: str, path: Path) -> Card:
        from awide_cluster.nvme.sysfs import Sysfs
        listen = self.addr(host)
        port = NVME_PORT_NETNS if self.net is not None else self._reserve_port(listen)
        serial, nguid = nvme_serial(key), nvme_nguid(key)
        sysfs = FakeSysfs(self._sysfs_root(host))
        sysfs.add_controller(subsysnqn=nvme_nqn(key), serial=serial, model=NVME_MODEL,
                             traddr=listen, trsvcid=port,
                             namespaces=[FakeNs(nsid=1, nguid=nguid)])
        # the identity the daemon reads from that sysfs (Namespace.identity's form)
        ns = Sysfs(sysfs.root).find_by_serial(serial)[0].namespace()
        ident = (ns.identity if ns is not None else None) or "nguid:" + nguid
        return Card(key, host, name, "nvme", path, port, listen,
                    id=regdoc.card_id(serial, NVME_MODEL, ident), serial=serial)

    def _spawn_store(self, card: Card, bound: float = 5.0) -> None:
        cmd = self._command("store")
        argv = fill(cmd.argv, host=card.listen, port=card.port, card=card.key, dir=card.path)
        card.proc = self.launcher.spawn(f"store-{card.host}-{card.name}", argv,
                                        netns=self.netns(card.host), env=dict(cmd.env))
        card.starts += 1
        self._await_log(card.proc, "listening on", card.starts, bound)

    def _write_daemon_config(self, host: str) -> None:
        h = self._hosts[host]
        t = self.spec.timing
        cards = [card_spec(c.name, str(c.path), c.port, t, c.listen) if c.kind == "dir" else
                 nvme_card_spec(c.name, c.key, c.listen, c.port, t)
                 for c in (self._cards[k] for k in h.cards)]
        nvme = any(self._cards[k].kind == "nvme" for k in h.cards)
        doc = daemon_config(self.spec, host, self.etcd.endpoints, h.api_port, cards,
                            address=self.addr(host),
                            sysfs_root=str(self._sysfs_root(host)) if nvme else None,
                            auth=self.etcd_auth(host_user(self.spec.cluster, host)),
                            allowed=self.allowed(),
                            # a host running another release's code (code_roots) gets only
                            # the sections that release knows: no damping section
                            damping_off=host not in self.code_roots)
        tmp = h.config.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(doc, sort_keys=False))
        tmp.replace(h.config)

    def _spawn_daemon(self, host: str) -> None:
        h = self._hosts[host]
        cmd = self._command("daemon")
        h.proc = self.launcher.spawn(f"daemon-{host}", fill(cmd.argv, config=h.config),
                                     netns=self.netns(host),
                                     env={**cmd.env, **self._code_env(host)})

    def _new_gateway(self, index: int, gid: str) -> None:
        ghost = self.spec.gateway_hosts[index]
        env: dict[str, str] = {}
        nvme: dict[str, Any] | None = None
        nvme_cards = [c for c in self._cards.values() if c.kind == "nvme"]
        if nvme_cards:
            world = FakeNvmeWorld(self.work_dir / "worlds" / ghost)
            for c in nvme_cards:
                world.add_target(nvme_nqn(c.key), serial=c.serial, model=NVME_MODEL,
                                 traddr=c.listen, trsvcid=c.port, nguid=nvme_nguid(c.key))
            nvme = {"program": str(world.bin_dir / "nvme"),
                    "sysfs_root": str(world.sysfs_root), "command_timeout": 2.0,
                    # a host NQN of its own: its controllers show it (the stray sweep)
                    "hostnqn": f"nqn.2024-01.io.awide:{gid}"}
            env = {k: v for k, v in world.env().items() if k == "PATH" or k.startswith("AWIDE_")}
            self.worlds[gid] = world
        path = self.work_dir / "config" / f"{gid}.yaml"
        doc = gateway_config(self.spec, index, self.etcd.endpoints, nvme,
                             auth=self.etcd_auth(gateway_user(self.spec.cluster, gid)),
                             allowed=self.allowed())
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        port = METRICS_PORT_NETNS if self.net is not None else self._reserve_port()
        g = self._gateways[gid] = GatewayState(gid, index, ghost, path, GatewayFeed(gid),
                                           f"{self.addr(ghost)}:{port}", env=env)
        self._spawn_gateway(g)

    def _spawn_gateway(self, g: GatewayState) -> None:
        """Start gateway ``g``'s process (again), its lines to its feed (or the sink)."""
        cmd = self._command("gateway")
        g.proc = self.launcher.spawn(f"gateway-{g.id}",
                                     fill(cmd.argv, config=g.config, metrics=g.metrics),
                                     netns=self.netns(g.host), pipe_stdout=True,
                                     env={**g.env, **cmd.env, **self._code_env(g.id)})
        assert g.proc.popen.stdout is not None
        if self.gateway_lines is None:
            g.feed.start(g.proc.popen.stdout)
        else:
            threading.Thread(target=self._pass_lines, args=(g.proc.popen.stdout,),
                             name=f"lines-{g.id}", daemon=True).start()

    def allowed(self) -> dict[str, list[str]] | None:
        """``spec.allowed_addresses``: each storage host's own address, as allowed target
        addresses."""
        if not self.spec.allowed_addresses:
            return None
        return {h: [self.addr(h)] for h in self.spec.storage_names}

    def _pass_lines(self, stream: IO[bytes]) -> None:
        sink = self.gateway_lines
        assert sink is not None
        try:
            for line in iter(stream.readline, b""):
                sink(line)
        except (OSError, ValueError):
            pass

    def _check_alive(self, host: str) -> None:
        proc = self._hosts[host].proc
        if proc is not None and not proc.alive():
            raise self._failure(f"daemon {host} exited ({proc.popen.returncode})", proc)

    def _await_log(self, proc: Proc, text: str, count: int, bound: float) -> None:
        """Until the process's log says ``text`` ``count`` times (its start-up line)."""
        def said() -> bool:
            try:
                return proc.log_path.read_text(errors="replace").count(text) >= count
            except OSError:
                return False

        def alive() -> None:
            if not proc.alive():
                raise WaitTimeout(f"{proc.name} exited", bound, proc.popen.returncode)

        try:
            wait_until_sync(said, bound, f"{proc.name} says {text!r}", poll=0.01, check=alive)
        except WaitTimeout:
            raise self._failure(f"{proc.name} did not say {text!r} within {bound:g} s",
                                proc) from None

    def host_procs(self, host: str) -> list[Proc]:
        """The live processes of a daemon host: its daemon and its cards' store services."""
        procs = [self._host(host).proc] + [self._cards[k].proc for k in self._host(host).cards]
        return [p for p in procs if p is not None and p.alive()]
