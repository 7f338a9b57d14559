"""The C load generator of figure 6 (``bench/leanload.c``), built with the system compiler as
the benchmark builds it, drives simulated gateways' whole request mix, then the naive poller,
against a real 3-member etcd: the windows count the polls made (none failed, none over the
bound), the requests answered, the watch streams' bytes and the generator's own CPU."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench import cgen
from bench.loadset import LoadSet
from tests.bench.generators import SPAN, registry_revision, window
from tests.timing import bound

CLUSTER = "cgen1"
GATEWAYS = 30                 # 10 per member
KEEPALIVE_TTL = 10            # a keepalive every 3.3 s: due about once in a window of SPAN s


def test_bad_source_is_a_clear_build_error(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    cc = cgen.compiler()
    if cc is None:
        pytest.skip("no C compiler (cc or gcc): apt-get install gcc")
    bad = tmp_path / "bad.c"
    bad.write_text("int main(void) { return nope; }\n")
    monkeypatch.setattr(cgen, "SOURCE", bad)
    with pytest.raises(cgen.BuildError, match="could not build bad.c.*nope"):
        cgen.build(tmp_path / "out", cc)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_c_generator_drives_the_whole_mix_and_the_naive_poller(
        tmp_path: Path, etcd3) -> None:
    cc = cgen.compiler()
    if cc is None:
        pytest.skip("no C compiler (cc or gcc): apt-get install gcc")
    gen = cgen.choose(tmp_path / "build")
    assert gen.name == "c" and gen.program is not None
    rev = asyncio.run(registry_revision(etcd3.endpoints, CLUSTER))
    load = LoadSet(etcd3.endpoints, CLUSTER, procs=2, log_dir=tmp_path / "logs", name="cgen-",
                   module="bench.leanload", program=gen.program,
                   extra=cgen.spec(CLUSTER, rev, KEEPALIVE_TTL))
    try:
        load.set(GATEWAYS, "mix")
        win = window(load)
        due = GATEWAYS * SPAN
        assert win.generators == {"c"}
        # every turn is a poll made or one the watch proved fresh (left out)
        assert win.polls + win.proven >= 0.9 * due, (win.polls, win.proven, due, win.skipped)
        assert win.proven > 0
        assert win.failed == 0 and win.over == 0, win
        assert len(win.lat_ms) == win.polls and max(win.lat_ms) < bound(500)
        # polls and keepalives (every 3.3 s) answered since the mark, the window's wait for
        # its last answers (0.7 s) included
        assert win.polls <= win.requests <= win.polls + GATEWAYS * 3, win
        assert win.watch_bytes > 0                   # created answers and progress notifications
        assert 0 < win.gen_cpu_s / win.requests < bound(0.25e-3), win.gen_cpu_s
        assert 0 <= win.gen_sys_s <= win.gen_cpu_s

        load.set(GATEWAYS // 3, "naive")
        naive = window(load)
        assert naive.polls >= 0.9 * GATEWAYS // 3 * SPAN, naive
        assert naive.failed == 0 and naive.over == 0, naive
        assert naive.requests >= naive.polls
    finally:
        load.close()
