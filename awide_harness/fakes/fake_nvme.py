#!/usr/bin/env python3
"""A fake ``nvme`` (nvme-cli 2.3) for tests: installed as ``nvme`` in a temp dir on PATH.

Environment:
  AWIDE_FAKE_NVME_WORLD  JSON world file (required), see FakeNvmeWorld in
                         awide_harness/fakes/world.py
  AWIDE_FAKE_SYSFS       root of the fake sysfs tree it creates controllers in (required)
  AWIDE_FAKE_NVME_LOG    file where every argv received is appended as one JSON line

World file::

  {"hostnqn": "...", "hostid": "...",
   "targets": [{"transport": "tcp", "traddr": "10.200.0.11", "trsvcid": 4420,
                "subnqn": "nqn...", "serial": "...", "model": "...", "firmware": "1.0",
                "nsid": 1, "nguid": "<32 hex>", "eui64": "<16 hex>"|null, "reachable": true,
                "allowed_hosts": null | ["<host nqn>", ...],
                "dhchap_keys": {"<host nqn>": "DHHC-1:..."},
                "dhchap_ctrl_keys": {"<host nqn>": "DHHC-1:..."}}],
   "faults": {"<command>|*": {"mode": "hang"|"fail"|"output"|"noop",
                              "rc": 1, "stdout": "", "stderr": "", "times": N}}}

A target with ``allowed_hosts`` refuses a connect whose host NQN (``--hostnqn``, else the
world's) is not listed, and one with a key for that host refuses a connect without the same
``--dhchap-secret`` (as the kernel does: nvme-cli then says it could not add the controller);
a connect asking the controller for a key (``--dhchap-ctrl-secret`` or the port's
``dhchap_ctrl_key`` in ``--config``) fails unless the target's ``dhchap_ctrl_keys`` holds that
key for the host.

Commands: connect, disconnect, list-subsys, list, id-ctrl, id-ns (JSON shapes as in
tests/fixtures/nvme-cli-2.3/), discover (a discovery controller on every target address, at
its targets' ports and the world's ``discovery_port``, 8009 by default, as Linux nvmet and a
dedicated one answer: it lists the targets at that address whose
``published`` is not false, then the world's ``discovery_extra`` records). ``connect``
creates ``class/nvme/nvmeN`` (next never-used N) with its namespace; ``disconnect`` removes
controllers. ``hang`` starts a child process and
sleeps (both must be killed by the caller's runner; their pids are logged).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parents[1] / "tests" / "fixtures" / "nvme-cli-2.3"   # recorded real output

_spec = importlib.util.spec_from_file_location("_awide_fake_sysfs", HERE / "sysfs.py")
assert _spec and _spec.loader
fake_sysfs = importlib.util.module_from_spec(_spec)
sys.modules["_awide_fake_sysfs"] = fake_sysfs
_spec.loader.exec_module(fake_sysfs)

VALUE_OPTS = {
    "connect": {"transport": "t", "traddr": "a", "trsvcid": "s", "nqn": "n", "hostnqn": "q",
                "hostid": "I", "dhchap-secret": "S", "dhchap-ctrl-secret": "C",
                "host-traddr": "w", "host-iface": "f", "ctrl-loss-tmo": "l",
                "reconnect-delay": "c", "keep-alive-tmo": "k", "output-format": "o",
                "nr-io-queues": "i", "queue-size": "Q", "config": "J"},
    "disconnect": {"nqn": "n", "device": "d"},
    "list-subsys": {"output-format": "o"},
    "list": {"output-format": "o"},
    "id-ctrl": {"output-format": "o"},
    "id-ns": {"output-format": "o", "namespace-id": "n"},
    "discover": {"transport": "t", "traddr": "a", "trsvcid": "s", "hostnqn": "q",
                 "hostid": "I", "nqn": "n", "output-format": "o"},
}
FLAG_OPTS = {
    "connect": {"duplicate-connect": "D", "verbose": "v", "hdr-digest": "g",
                "data-digest": "G", "disable-sqflow": "d"},
    "disconnect": {"verbose": "v"},
    "list-subsys": {"verbose": "v"},
    "list": {"verbose": "v"},
    "id-ctrl": {"human-readable": "H", "vendor-specific": "v", "raw-binary": "b"},
    "id-ns": {"human-readable": "H", "vendor-specific": "v", "raw-binary": "b"},
    "discover": {"verbose": "v", "persistent": "p"},
}


class Usage(Exception):
    pass


def out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def err(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def parse_args(command: str, args: list[str]) -> tuple[dict[str, str], list[str]]:
    values = VALUE_OPTS[command]
    flags = FLAG_OPTS[command]
    short_values = {v: k for k, v in values.items()}
    short_flags = {v: k for k, v in flags.items()}
    opts: dict[str, str] = {}
    positional: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if name in values:
                if not eq:
                    i += 1
                    if i >= len(args):
                        raise Usage(f"option '--{name}' requires an argument")
                    value = args[i]
                opts[name] = value
            elif name in flags and not eq:
                opts[name] = "1"
            else:
                raise Usage(f"unrecognized option '--{name}'")
        elif arg.startswith("-") and len(arg) >= 2:
            letter = arg[1]
            if letter in short_values:
                value = arg[2:]
                if not value:
                    i += 1
                    if i >= len(args):
                        raise Usage(f"option requires an argument -- '{letter}'")
                    value = args[i]
                opts[short_values[letter]] = value
            elif letter in short_flags and len(arg) == 2:
                opts[short_flags[letter]] = "1"
            else:
                raise Usage(f"invalid option -- '{letter}'")
        else:
            positional.append(arg)
        i += 1
    return opts, positional


def dump(doc: object) -> str:
    return json.dumps(doc, indent=2, separators=(",", ":")) + "\n"


class World:
    def __init__(self) -> None:
        world = os.environ.get("AWIDE_FAKE_NVME_WORLD")
        root = os.environ.get("AWIDE_FAKE_SYSFS")
        if not world or not root:
            err("fake nvme: AWIDE_FAKE_NVME_WORLD and AWIDE_FAKE_SYSFS must be set\n")
            sys.exit(97)
        self.path = Path(world)
        self.sysfs = fake_sysfs.FakeSysfs(root)
        self.doc = json.loads(self.path.read_text())

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.doc, indent=1))
        os.replace(tmp, self.path)

    def take_fault(self, command: str) -> dict | None:
        """Call with the sysfs lock held: re-reads the world so 'times' counts are exact."""
        self.doc = json.loads(self.path.read_text())
        faults = self.doc.get("faults", {})
        key = command if command in faults else "*" if "*" in faults else None
        if key is None:
            return None
        fault = dict(faults[key])
        if "times" in fault:
            remaining = int(fault["times"]) - 1
            if remaining <= 0:
                del faults[key]
            else:
                faults[key]["times"] = remaining
            self.save()
        return fault

    def target(self, transport: str, traddr: str, trsvcid: str, nqn: str) -> dict | None:
        for t in self.doc.get("targets", []):
            if (t.get("transport", "tcp") == transport and t["traddr"] == traddr
                    and str(t["trsvcid"]) == trsvcid and t["subnqn"] == nqn):
                return t
        return None

    def target_by_nqn(self, nqn: str) -> dict | None:
        for t in self.doc.get("targets", []):
            if t["subnqn"] == nqn:
                return t
        return None

    def controllers(self) -> list[dict]:
        fs = self.sysfs
        found = []
        for name in fs.controller_names():
            ctrl: dict[str, Any] = {k: fs.attr(name, k) or "" for k in (
                "transport", "address", "subsysnqn", "serial", "model", "firmware_rev",
                "state", "cntlid")}
            ctrl["name"] = name
            ctrl["namespaces"] = []
            for ns in fs.namespaces(name):
                nsid = int(fs.ns_attr(name, ns, "nsid") or 0)
                parts = ns[4:].replace("c", " ").replace("n", " ").split()
                device = ns if "c" not in ns else f"nvme{parts[0]}n{parts[2]}"
                ctrl["namespaces"].append({"dir": ns, "nsid": nsid, "device": device,
                                           "nguid": fs.ns_attr(name, ns, "nguid")})
            found.append(ctrl)
        return found


def config_key(opts: dict, host: str, ctrl: bool = False) -> str | None:
    """The host's DH-HMAC-CHAP key (``ctrl``: the controller key of this connect's port) from
    ``--config`` (libnvme's JSON configuration), as nvme-cli 2.3 takes it: only from a host
    entry with this connect's hostnqn and hostid."""
    path = opts.get("config")
    if not path or path == "none":
        return None
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    for entry in doc if isinstance(doc, list) else []:
        if (isinstance(entry, dict) and entry.get("hostnqn") == host
                and entry.get("hostid") == opts.get("hostid")):
            if not ctrl:
                return entry.get("dhchap_key")
            for subsys in entry.get("subsystems") or []:
                if subsys.get("nqn") != opts.get("nqn"):
                    continue
                for port in subsys.get("ports") or []:
                    if (port.get("traddr") == opts.get("traddr")
                            and str(port.get("trsvcid")) == opts.get("trsvcid", "4420")):
                        return port.get("dhchap_ctrl_key")
    return None


def log_call(argv: list[str], **extra: object) -> None:
    path = os.environ.get("AWIDE_FAKE_NVME_LOG")
    if not path:
        return
    with open(path, "a") as f:
        f.write(json.dumps({"argv": argv, "pid": os.getpid(), **extra}) + "\n")


def apply_fault(command: str, fault: dict) -> int | None:
    mode = fault.get("mode")
    if mode == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        log_call([], hang_child_pid=child.pid)
        while True:
            time.sleep(3600)
    if mode in ("fail", "output"):
        out(fault.get("stdout", ""))
        err(fault.get("stderr", "" if mode == "output" else "fake failure\n"))
        return int(fault.get("rc", 1 if mode == "fail" else 0))
    if mode == "noop":
        if command == "disconnect":
            out("NQN:(none) disconnected 0 controller(s)\n")
        return 0
    return None


def cmd_connect(world: World, opts: dict[str, str]) -> int:
    for name, letter in (("transport", "t"), ("nqn", "n"), ("traddr", "a")):
        if not opts.get(name):
            err(f"required argument [--{name} | -{letter}] not specified\n")
            return 1
    transport, traddr, nqn = opts["transport"], opts["traddr"], opts["nqn"]
    trsvcid = opts.get("trsvcid", "4420")
    fs = world.sysfs
    with fs.lock():
        for ctrl in world.controllers():
            if (ctrl["subsysnqn"] == nqn and ctrl["transport"] == transport
                    and ctrl["address"].startswith(f"traddr={traddr},trsvcid={trsvcid}")
                    and ctrl["state"] != "deleting"):
                err("already connected\n")
                return 1
        target = world.target(transport, traddr, trsvcid, nqn)
        if target is None or not target.get("reachable", True):
            err("Failed to write to /dev/nvme-fabrics: Connection refused\n"
                "could not add new controller: failed to write to nvme-fabrics device\n")
            return 1
        host = opts.get("hostnqn") or world.doc.get("hostnqn", "")
        allowed = target.get("allowed_hosts")
        key = (target.get("dhchap_keys") or {}).get(host)
        given = opts.get("dhchap-secret") or config_key(opts, host)
        ctrl_key = (target.get("dhchap_ctrl_keys") or {}).get(host)
        asked = opts.get("dhchap-ctrl-secret") or config_key(opts, host, ctrl=True)
        if (allowed is not None and host not in allowed) or (
                key is not None and given != key) or (
                asked is not None and asked != ctrl_key):
            err("Failed to write to /dev/nvme-fabrics: Input/output error\n"
                "could not add new controller: failed to write to nvme-fabrics device\n")
            return 1
        ns = fake_sysfs.FakeNs(nsid=int(target.get("nsid", 1)), nguid=target.get("nguid"),
                               eui64=target.get("eui64"))
        name = fs.add_controller(
            subsysnqn=nqn, serial=target["serial"],
            model=target.get("model", "AWIDE Fake NVMe Ctrl"),
            firmware_rev=target.get("firmware", "1.0"), transport=transport,
            traddr=traddr, trsvcid=trsvcid, state=target.get("state", "live"),
            cntlid=int(target.get("cntlid", 1)), namespaces=[ns], hostnqn=host)
    if opts.get("output-format") == "json":
        out(dump({"device": name}))
    else:
        out(f"device: {name}\n")
    return 0


def cmd_disconnect(world: World, opts: dict[str, str]) -> int:
    fs = world.sysfs
    with fs.lock():
        if opts.get("nqn"):
            nqn = opts["nqn"]
            gone = [c["name"] for c in world.controllers() if c["subsysnqn"] == nqn]
            for name in gone:
                fs.remove_controller(name)
            out(f"NQN:{nqn} disconnected {len(gone)} controller(s)\n")
            return 0
        if opts.get("device"):
            for dev in opts["device"].split(","):
                dev = dev.removeprefix("/dev/")
                if dev not in fs.controller_names():
                    err(f"Did not find device {dev}\n")
                    return 1
                fs.remove_controller(dev)
            return 0
    err("need a subsystem NQN or device\n")
    return 1


def cmd_list_subsys(world: World, opts: dict[str, str]) -> int:
    ctrls = world.controllers()
    subsystems: dict[str, dict] = {}
    for c in ctrls:
        sub = subsystems.setdefault(c["subsysnqn"], {"Name": "", "NQN": c["subsysnqn"],
                                                     "Paths": []})
        sub["Paths"].append({"Name": c["name"], "Transport": c["transport"],
                             "Address": c["address"] + ",src_addr=10.200.0.1"
                             if c["transport"] != "pcie" else c["address"],
                             "State": c["state"]})
    for sysdir in sorted(world.sysfs.subsys_dir.iterdir()):
        nqn = (sysdir / "subsysnqn").read_text().strip()
        if nqn in subsystems:
            subsystems[nqn]["Name"] = sysdir.name
    if opts.get("output-format") == "json":
        host = {"HostNQN": world.doc.get("hostnqn", "nqn.2014-08.org.nvmexpress:uuid:"
                                         "b97306f6-0dde-4ab1-a911-14ab9f32adc8"),
                "HostID": world.doc.get("hostid", "da4b0ffa-ac78-436d-8e7b-18872898627a"),
                "Subsystems": list(subsystems.values())}
        out(dump([host]))
    else:
        for sub in subsystems.values():
            out(f"{sub['Name']} - NQN={sub['NQN']}\n\\\n")
            for p in sub["Paths"]:
                out(f" +- {p['Name']} {p['Transport']} {p['Address']} {p['State']} \n")
    return 0


def cmd_list(world: World, opts: dict[str, str]) -> int:
    devices = []
    for c in world.controllers():
        for ns in c["namespaces"]:
            devices.append({"NameSpace": ns["nsid"], "DevicePath": f"/dev/{ns['device']}",
                            "Firmware": c["firmware_rev"], "ModelNumber": c["model"],
                            "SerialNumber": c["serial"], "UsedBytes": 1073741824,
                            "MaximumLBA": 2097152, "PhysicalSize": 1073741824,
                            "SectorSize": 512})
    out(dump({"Devices": devices}))
    return 0


def _find_device(world: World, device: str) -> tuple[dict, dict | None] | None:
    name = device.removeprefix("/dev/")
    for c in world.controllers():
        if c["name"] == name:
            return c, None
        for ns in c["namespaces"]:
            if ns["device"] == name:
                return c, ns
    return None


def cmd_id_ctrl(world: World, opts: dict[str, str], positional: list[str]) -> int:
    found = _find_device(world, positional[0]) if positional else None
    if found is None:
        err(f"{positional[0] if positional else '<device>'}: No such file or directory\n")
        return 1
    c, _ = found
    doc = json.loads((FIXTURES / "id-ctrl.json").read_text())
    doc.update(sn=c["serial"].ljust(20), mn=c["model"].ljust(40),
               fr=c["firmware_rev"].ljust(8), subnqn=c["subsysnqn"],
               cntlid=int(c["cntlid"] or 0))
    out(dump(doc))
    return 0


def cmd_id_ns(world: World, opts: dict[str, str], positional: list[str]) -> int:
    found = _find_device(world, positional[0]) if positional else None
    if found is None or found[1] is None:
        err(f"{positional[0] if positional else '<device>'}: No such file or directory\n")
        return 1
    c, ns = found
    assert ns is not None
    doc = json.loads((FIXTURES / "id-ns.json").read_text())
    target = world.target_by_nqn(c["subsysnqn"]) or {}
    # sysfs first; else the world's (as on kernels whose sysfs lacks the nguid attribute)
    nguid = (ns.get("nguid") or "").replace("-", "") or target.get("nguid") or "0" * 32
    doc.update(nguid=nguid, eui64=(target.get("eui64") or "0" * 16))
    out(dump(doc))
    return 0


def cmd_discover(world: World, opts: dict[str, str]) -> int:
    transport, traddr = opts.get("transport"), opts.get("traddr")
    if not transport or not traddr:
        err("required argument [--transport | -t] or [--traddr | -a] not specified\n")
        return 1
    at = [t for t in world.doc.get("targets", []) if t["traddr"] == traddr
          and t.get("transport", "tcp") == transport and t.get("reachable", True)]
    ports = {str(t["trsvcid"]) for t in at} | {str(world.doc.get("discovery_port", 8009))}
    if not at or opts.get("trsvcid", "8009") not in ports:
        err("Failed to write to /dev/nvme-fabrics: Connection refused\n"
            "failed to add controller, error connection refused\n")
        return 1
    records: list[dict[str, Any]] = [{
        "trtype": transport, "adrfam": "ipv4", "subtype": "current discovery subsystem",
        "treq": "not specified", "portid": 0, "trsvcid": opts.get("trsvcid", "8009"),
        "subnqn": "nqn.2014-08.org.nvmexpress.discovery", "traddr": traddr,
        "eflags": "none", "sectype": "none"}]
    records += [{"trtype": t.get("transport", "tcp"), "adrfam": "ipv4",
                 "subtype": "nvme subsystem", "treq": "not specified", "portid": 1,
                 "trsvcid": str(t["trsvcid"]), "subnqn": t["subnqn"], "traddr": t["traddr"],
                 "eflags": "none", "sectype": "none"}
                for t in at if t.get("published", True)]
    records += world.doc.get("discovery_extra", [])
    if opts.get("output-format") == "json":
        out(dump({"genctr": len(records), "records": records}))
    else:
        out(f"\nDiscovery Log Number of Records {len(records)}, Generation counter "
            f"{len(records)}\n")
        for i, r in enumerate(records):
            out(f"=====Discovery Log Entry {i}======\n")
            for k, v in r.items():
                out(f"{k}: {v}\n")
    return 0


def main(argv: list[str]) -> int:
    log_call(argv)
    if not argv:
        err("usage: nvme <command> [<device>] [<args>]\n")
        return 1
    command, args = argv[0], argv[1:]
    if command not in VALUE_OPTS:
        err(f"ERROR: Invalid sub-command '{command}'\n")
        return 1
    world = World()
    with world.sysfs.lock():
        fault = world.take_fault(command)
    if fault is not None:
        rc = apply_fault(command, fault)
        if rc is not None:
            return rc
    try:
        opts, positional = parse_args(command, args)
    except Usage as exc:
        err(f"nvme: {exc}\n")
        return 1
    if command == "connect":
        return cmd_connect(world, opts)
    if command == "disconnect":
        return cmd_disconnect(world, opts)
    if command == "list-subsys":
        return cmd_list_subsys(world, opts)
    if command == "list":
        return cmd_list(world, opts)
    if command == "id-ctrl":
        return cmd_id_ctrl(world, opts, positional)
    if command == "discover":
        return cmd_discover(world, opts)
    return cmd_id_ns(world, opts, positional)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
