"""Both load generators of figure 6 switch parts of a gateway's mix off (``parts`` in their
spec): against a real 3-member etcd, a window counts polls only when the poll is on, watch
bytes only when the watch is on, and keepalives answered only when the keepalive is on; with
the watch's proof on (the library's way) only the linearizable poll of every tenth turn is
made while the watch delivers; an unknown part is an error naming it. The end-to-end checks
run as one scenario per generator (five gateway sets at once, two windows)."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from awide_gateway_cluster.config import TimingSection as GatewayTiming
from bench import cgen
from bench.leanload import PARTS, parts_of
from bench.loadset import LoadSet
from tests.bench.generators import SPAN, registry_revision, windows

CLUSTER = "parts1"
GATEWAYS = 12                 # 4 per member
# a 10 s lease (a keepalive every 3.3 s, not the gateway default's 10 s): a window of SPAN
# seconds sees keepalives from most gateways
KEEPALIVE_TTL = 10


def _programs(tmp_path: Path) -> list[tuple[str, tuple[str, ...] | None]]:
    got: list[tuple[str, tuple[str, ...] | None]] = [("python", None)]
    if cgen.compiler() is not None:
        gen = cgen.choose(tmp_path / "build")
        got.append(("c", gen.program))
    return got


def test_parts_default_to_the_whole_mix_and_a_bad_one_is_named() -> None:
    assert parts_of({}) == frozenset(PARTS)
    assert parts_of({"parts": ["watch"]}) == {"watch"}
    with pytest.raises(ValueError, match=r"unknown part\(s\) \['polls'\]"):
        parts_of({"parts": ["poll", "polls"]})
    with pytest.raises(ValueError, match="must be a list"):
        parts_of({"parts": "poll"})


def _c_refuses(tmp_path: Path, extra: str) -> str:
    """The C generator started on a spec with ``extra`` fields: its exit 2 and stderr."""
    if cgen.compiler() is None:
        pytest.skip("no C compiler (cc or gcc): apt-get install gcc")
    gen = cgen.choose(tmp_path / "build")
    assert gen.program is not None
    spec = ('{"endpoints": ["http://127.0.0.1:2379"], "registry_key_b64": "YQ==", '
            f'"registry_mod_revision": 1{extra}}}')
    done = subprocess.run([*gen.program, spec], capture_output=True, text=True, timeout=30,
                          stdin=subprocess.PIPE)
    assert done.returncode == 2
    return done.stderr


def test_c_generator_names_an_unknown_part(tmp_path: Path) -> None:
    assert "unknown part gossip" in _c_refuses(
        tmp_path, ', "lease_ttl": 30, "parts": ["poll", "gossip"]')


def test_the_lease_ttl_is_the_gateway_configs_unless_given(tmp_path: Path) -> None:
    """The figure's keepalive period follows the gateway's default lease (every TTL/3): the
    spec carries it; the C generator has no default of its own and names what is missing."""
    assert cgen.GATEWAY_LEASE_TTL == GatewayTiming().registration_ttl
    assert cgen.spec(CLUSTER, 7)["lease_ttl"] == cgen.GATEWAY_LEASE_TTL
    assert cgen.spec(CLUSTER, 7, 10)["lease_ttl"] == 10
    assert "the spec has no lease_ttl" in _c_refuses(tmp_path, "")


def _loads(etcd3, tmp_path: Path, name: str, program: tuple[str, ...] | None, rev: int,
           parts: dict[str, list[str]]) -> dict[str, LoadSet]:
    """One load set per entry of ``parts`` (its label: the parts it runs), all started at
    once against the same etcd, each with GATEWAYS gateways; closed by the caller."""
    loads: dict[str, LoadSet] = {}
    try:
        for label, only in parts.items():
            loads[label] = LoadSet(
                etcd3.endpoints, CLUSTER, procs=1, log_dir=tmp_path / "logs",
                name=f"{name}-{label.replace(' ', '')}-", module="bench.leanload",
                program=program, extra={**cgen.spec(CLUSTER, rev, KEEPALIVE_TTL), "parts": only})
        for load in loads.values():
            load.set(GATEWAYS, "mix")
    except BaseException:
        for load in loads.values():
            load.close()
        raise
    return loads


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_each_part_alone_and_the_watch_proof_on_both_generators(tmp_path: Path, etcd3) -> None:
    """Five gateway sets at once, each counting its own requests: one part each (poll, watch,
    keepalive), judged on the first window; and with the watch's proof or without it. The
    fixtures' members notify watch progress every second: with "proof" (the default mix) a
    gateway's serializable polls are left out and counted as proven, so about one turn in ten
    polls; without it every turn polls. Judged on the second window (the first turns are
    linearizable: no proof yet)."""
    rev = asyncio.run(registry_revision(etcd3.endpoints, CLUSTER))
    for name, program in _programs(tmp_path):
        loads = _loads(etcd3, tmp_path, name, program, rev,
                       {**{part: [part] for part in ("poll", "watch", "keepalive")},
                        "proof": list(PARTS), "no proof": ["poll", "watch"]})
        try:
            first = windows(loads)
            seen = windows(loads)
        finally:
            for load in loads.values():
                load.close()
        poll, watch, keepalive = first["poll"], first["watch"], first["keepalive"]
        ctx = (name, poll, watch, keepalive)
        assert poll.polls >= 0.9 * GATEWAYS * SPAN and poll.failed == 0, ctx
        assert poll.requests >= poll.polls and poll.watch_bytes == 0, ctx
        assert watch.polls == 0 and watch.requests == 0 and watch.watch_bytes > 0, ctx
        assert keepalive.polls == 0 and keepalive.watch_bytes == 0, ctx
        assert keepalive.requests >= GATEWAYS // 2, ctx       # keepalives answered
        proof, plain = seen["proof"], seen["no proof"]
        both = (name, proof, plain)
        turns = GATEWAYS * SPAN
        assert plain.polls >= 0.9 * turns and plain.proven == 0, both
        assert proof.proven >= 0.5 * turns and proof.polls <= 0.4 * turns, both
        assert proof.failed == plain.failed == 0 and proof.watch_bytes > 0, both
