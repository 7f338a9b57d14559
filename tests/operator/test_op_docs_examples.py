"""Every command example of docs/operations.md runs as written, with its documented exit code.

The examples are the lines of the fenced ``sh`` blocks that start with ``awide-cluster``
(a line ending in ``\\`` continues on the next). They run in document order (consecutive
examples that only read, ``status``, ``cards`` and ``history``, at once), as the real
command, against a real etcd and real daemons of the cluster the examples name (``prod1``,
hosts ``store-a`` and ``store-b``, cards ``SN-A1``, ``SN-A2``, ``SN-B1``). What a real host
has and a test cannot, the test puts in place: the two config files (a daemon's at
``/etc/awide-cluster/cluster.yaml``, through ``$AWIDE_DEFAULT_CONFIG``; a gateway's), and the
etcd endpoints. The expected exit code is the one the example's comment gives (``exit N``),
else 0. An example piped into ``jq`` must print JSON.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import signal
from pathlib import Path

import pytest
import yaml

from tests.operator.op_fixtures import shared_etcd  # noqa: F401
from tests.operator.op_lab import CLI, Lab
from tests.timing import WaitTimeout, bound, wait_until

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
DAEMON_FILE = "/etc/awide-cluster/cluster.yaml"
GATEWAY_FILE = "/etc/vllm/awide-gateway.yaml"
DOC_ENDPOINTS = "https://10.0.0.1:2379,https://10.0.0.2:2379,https://10.0.0.3:2379"
LAYOUT = {"store-a": [("card0", "SN-A1"), ("card1", "SN-A2")], "store-b": [("card0", "SN-B1")]}


def examples(text: str) -> list[tuple[str, int, str]]:
    """(command line, expected exit code, what it is piped into) of every example."""
    out = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            if not line.startswith("awide-cluster"):
                continue
            command, _, comment = line.partition(" #")
            m = re.search(r"\bexit (\d)\b", comment)
            command, _, pipe = command.partition(" | ")
            out.append((command.strip(), int(m.group(1)) if m else 0, pipe.strip()))
    return out


def test_the_examples_are_found():
    found = examples(DOC.read_text())
    verbs = {shlex.split(c)[1] for c, _, _ in found}
    assert {"status", "cards", "drain", "undrain", "forget"} <= verbs, found
    assert any(pipe.startswith("jq") for _, _, pipe in found)
    assert any(code == 1 for _, code, _ in found)


@pytest.fixture(autouse=True)
def this_checkout(monkeypatch) -> None:
    """The commands run as subprocesses import this checkout's package."""
    monkeypatch.setenv("PYTHONPATH", str(DOC.parents[1]))


async def _watch(lab: Lab, args: list[str]) -> tuple[int, str]:
    """A ``--watch`` or ``--follow`` example: until its first refresh or entry is printed,
    then Ctrl-C (SIGINT)."""
    p = await asyncio.create_subprocess_exec(
        CLI, *args, env=lab.environment(), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert p.stdout is not None
    try:
        first = await asyncio.wait_for(p.stdout.readline(), 60)
        p.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(p.communicate(), bound(30))
    finally:
        if p.returncode is None:
            p.kill()
            await p.wait()
    assert p.returncode is not None
    return p.returncode, (first + out + err).decode()


async def _settled_status(lab: Lab, args: list[str], expected: int,
                          first: tuple[int, str, str]) -> tuple[int, str, str]:
    """``status`` asked again until it gives the documented code, or its last answer. The
    daemons' lease is 1 s: on a loaded machine one can lapse for a moment and status then
    rightly says so; an example documents the state the cluster settles in."""
    last = first

    async def documented() -> tuple[int, str, str] | None:
        nonlocal last
        last = await lab.cli(*args)
        return last if last[0] == expected else None

    try:
        return await wait_until(documented, 15.0, what=f"status exits {expected}")
    except WaitTimeout:
        return last


# Examples that only read the cluster: consecutive ones run at once (they change nothing the
# next reads), in document order between the examples that act.
READS = ("status", "cards", "history")


@pytest.mark.timeout(300)      # ~45 s alone; more than twice that beside the other tests
async def test_every_example_runs_as_documented(shared_etcd, tmp_path):
    lab = Lab(shared_etcd, "prod1", tmp_path, layout=LAYOUT)
    gateway = tmp_path / "awide-gateway.yaml"
    gateway.write_text(yaml.safe_dump({
        "mode": "cluster", "cluster": "prod1", "host": "gpu1", "pod": "vllm-0",
        "etcd": {"endpoints": list(shared_etcd.endpoints)},
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}}))
    lab.env = {"AWIDE_DEFAULT_CONFIG": str(lab.file)}
    here = {DAEMON_FILE: str(lab.file), GATEWAY_FILE: str(gateway),
            DOC_ENDPOINTS: ",".join(shared_etcd.endpoints)}
    ran = []
    store_b_down = False

    async def run(command: str, expected: int, pipe: str) -> None:
        """One example as written, its exit code and output checked."""
        args = [here.get(a, a) for a in shlex.split(command)[1:]]
        if store_b_down and args[0] == "status" and expected == 0:
            expected = 1        # store-b is still configured, its daemon down: WARNING
        if "--watch" in args or "-w" in args or "--follow" in args:
            code, out = await _watch(lab, args)
            err = ""
        else:
            code, out, err = await lab.cli(*args)
            if args[0] == "status" and code != expected:
                code, out, err = await _settled_status(lab, args, expected, (code, out, err))
        assert code == expected, (command, code, out, err)
        if store_b_down and args[0] == "status" and "-o" not in args:
            assert "daemon_down" in out, out
        if pipe.startswith("jq"):
            json.loads(out)
        ran.append(command)

    reads: list[tuple[str, int, str]] = []
    async with lab:
        for command, expected, pipe in [*examples(DOC.read_text()), ("", 0, "")]:
            args = [here.get(a, a) for a in shlex.split(command)[1:]]
            if args and args[0] in READS:
                reads.append((command, expected, pipe))
                continue
            for failed in await asyncio.gather(*(run(*r) for r in reads),
                                               return_exceptions=True):
                if isinstance(failed, BaseException):
                    raise failed
            reads = []
            if not args:                # the end of the examples
                break
            if args[:2] == ["forget", "SN-B1"]:
                # the card was replaced: its host store-b is gone and it is out
                await lab.daemons["store-b"].stop()
                store_b_down = True
                await lab.until(lambda r: lab.card(r, "store-b", "card0").state == "out",
                                "SN-B1 out")
            if args[:2] == ["leader", "switchover"] and "--to" in args:
                # the example hands over to a host that does not lead: whichever leads now,
                # the lab's leader is moved away from it first (by the same command)
                to = args[args.index("--to") + 1]
                if lab.daemons[to].is_leader:
                    other = next(h for h, d in lab.daemons.items() if h != to)
                    code, out, err = await lab.cli("leader", "switchover", "--to", other)
                    assert code == 0, (out, err)
                    await wait_until(lambda o=other: lab.daemons[o].is_leader, bound(20),
                                     what=f"{other} leads")
            await run(command, expected, pipe)
        reg = await lab.registry()
        assert lab.card(reg, "store-b", "card0") is None          # the forget example
        assert lab.card(reg, "store-a", "card0").state == "in"    # drained, then undrained
    assert len(ran) >= 10
