"""The fault campaign: ``python -m tests.faults.runner --seed N --faults K --report FILE``.

Starts a real cluster (the harness's ``EmbeddedCluster`` with ``campaign_spec``: 3 etcd
members, daemons on two storage hosts and a witness, an NVMe and three directory cards, several
instrumented gateways, ``gateway_probe``) in network namespaces when root, on loopback
otherwise (the report says which and why), injects
the seeded schedule of faults (``schedule``) one after the other, and checks the invariants
(``invariants``) after every fault and once more at the end over etcd's history replayed from
revision 1. Writes the JSON report (``report``) and prints its summary; exit code 1 on any
violation (or a process that died on its own), 2 when the cluster could not be started.

``--quick``: every fault kind exactly once, short holds (what ``make test`` runs).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from awide_cluster.store import StoreConfig
from awide_harness import netns
from awide_harness.cluster import EmbeddedCluster
from awide_harness.spec import CardPlan, ClusterSpec, Command, Network, Timing
from awide_harness.waits import WaitTimeout, wait_until_sync
from tests.faults.campaign_record import GatewayTable, History, LogLine, PollObs, TruthChange
from tests.faults.gateway_probe import parse_line
from tests.faults.inject import Ctx, inject
from tests.faults.invariants import Bounds, agreed, bounds_for, check_all
from tests.faults.recorder import Recorder, replay
from tests.faults.report import build, summary
from tests.faults.schedule import KINDS, make_schedule

SLACK = 0.5               # scheduling delay allowed on a loaded 2-core machine
TIMINGS = {
    # the embedded harness's quick timing: poll 0.25 s, call 0.2 s, lease TTL 2 s, 3 sick polls
    "quick": Timing.quick(),
    # faster still, so that hundreds of faults fit in minutes: every bound scales with it
    "fast": Timing(poll_interval=0.15, lease_ttl=1, sick_polls=3, healthy_polls=1,
                   call_timeout=0.12),
}
PROCESS_START = 1.0       # a restarted daemon, once its API answers, reports within this
# the campaign's cards: s1 two directory cards, s2 a directory card and an NVMe card
CARDS = {"s1": (CardPlan("d0"), CardPlan("d1")), "s2": (CardPlan("d2"), CardPlan("n0", "nvme"))}
PROBE = Command((sys.executable, "-m", "tests.faults.gateway_probe", "--config", "{config}"))


def campaign_spec(*, gateways: int, timing: Timing, network: Network = "loopback",
                  etcd_binary: str | None = None) -> ClusterSpec:
    """The campaign's cluster: storage hosts s1, s2, witness w1 (one etcd member each),
    ``gateways`` instrumented gateways (``gateway_probe``)."""
    return ClusterSpec(cluster="campaign", storage_hosts=2, witness_hosts=1, gateways=gateways,
                       timing=timing, etcd_binary=etcd_binary, network=network, cards=CARDS,
                       commands={"gateway": PROBE})


class Campaign:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.timing = t = TIMINGS[args.timing]
        self.bounds: Bounds = bounds_for(
            gateway_poll=t.poll_interval, gateway_call=t.call_timeout,
            daemon_poll=t.poll_interval, lease_ttl=t.lease_ttl, sick_polls=t.sick_polls,
            slack=SLACK, process_start=PROCESS_START)
        self.history = History()
        self.cluster: EmbeddedCluster | None = None
        self.ctx: Ctx | None = None
        self.recorder: Recorder | None = None
        self.seen: set[tuple] = set()
        self.unexpected: list[str] = []
        self.expected_exit: set[str] = set()
        self.mode, self.mode_note = "loopback", ""
        # once every daemon reported after the heal, a late effect of the fault (the leader's
        # last bad count, a new leader's first cycle) shows within about a leader cycle (a later
        # one is not missed: it breaks the next fault's agreement, and every time-based check
        # still applies to it)
        self.quiet = t.poll_interval + 0.1
        self.leader_ok: bool | None = None
        self.check_time = 0.0                 # seconds spent in the continuous checks

    # ------------------------------------------------------------------ helpers

    def say(self, text: str, source: str = "runner") -> None:
        t = time.monotonic()
        self.history.add(LogLine(t, source, text))
        if self.args.verbose:
            print(f"{t - self.history.t0:8.2f} {text}", flush=True)

    def state(self, renamed=()) -> str:
        """"" when the registry is healed and every gateway agrees with it (now)."""
        c = self.cluster
        assert c is not None
        tabs = {g: self.history.latest_table(g) for g in c.gateway_ids}
        return agreed(self.history.latest_registry(), tabs, c.gateway_ids,
                      self.history.expected_in, renamed)

    def wait_agreed(self, bound: float, renamed=()) -> tuple[float | None, str]:
        why = [""]

        def agreed() -> bool:
            why[0] = self.state(renamed)
            return not why[0]

        try:
            wait_until_sync(agreed, bound, "the cluster agrees")
        except WaitTimeout:
            return None, why[0]
        return time.monotonic(), ""

    def settle(self, t_heal: float, cap: float, renamed=()) -> tuple[float | None, str]:
        """After a heal: wait until every daemon has reported again (so no late effect of the
        fault is still pending in the leader's counts), then until the registry is healed and
        every gateway agrees, for ``self.quiet`` seconds in a row. (start of that agreement,
        "") or (None, what is still wrong) after ``cap``."""
        c = self.cluster
        assert c is not None
        deadline = t_heal + cap

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        def reported_after(base: int) -> bool:
            got = c.reports(1.0)
            return got is not None and all(got[1].get(h, 0) > base for h in c.hosts)

        def leading() -> bool:
            holder = c.leader_or_none(1.0)
            st = c.daemon_status(holder) if holder is not None else None
            return st is not None and st.get("is_leader") is True

        try:
            got = wait_until_sync(lambda: c.reports(1.0), left(), "etcd answers")
            wait_until_sync(lambda: reported_after(got[0]), left(), "every daemon reported",
                            poll=0.05)
        except WaitTimeout:
            pass
        try:
            self.leader_ok = wait_until_sync(leading, left(), "the key's holder leads", poll=0.05)
        except WaitTimeout:
            self.leader_ok = False
            self.say(f"the leader key's holder ({c.leader_or_none(1.0)}) is not leading")
        since: list[float | None] = [None]
        why = [""]

        def quiet_since() -> float | None:
            """The start of an agreement that has lasted ``self.quiet`` seconds."""
            now = time.monotonic()
            why[0] = self.state(renamed)
            if why[0]:
                since[0] = None
            elif since[0] is None:
                since[0] = now
            elif now - since[0] >= self.quiet:
                return since[0]
            return None

        try:
            return wait_until_sync(quiet_since, left(), "a lasting agreement"), ""
        except WaitTimeout:
            return None, why[0] or "agreement did not last"

    def store_config(self) -> StoreConfig:
        """The cluster's store config with the campaign's patience (1 s per call) for the
        recorder's watch and the final replay."""
        assert self.cluster is not None
        return replace(self.cluster.store_config(), call_timeout=1.0)

    def take_line(self, line: bytes) -> None:
        """One line a gateway printed: its record (``gateway_probe.parse_line``), if any."""
        item = parse_line(line)
        if item is not None:
            self.take(item)

    def take(self, item: object) -> None:
        """A record from a gateway's lines: into the history, and into the event log when
        the gateway's generation or cards in service changed, or a poll failed."""
        if isinstance(item, GatewayTable):
            prev = self.history.latest_table(item.gateway)
            if prev is None or (prev.generation, prev.in_service) != (item.generation,
                                                                       item.in_service):
                names = self.cluster.names() if self.cluster is not None else {}
                ins = sorted(names.get(c, c) for c in item.in_service)
                outs = sorted(f"{names.get(s.card, s.card)} ({s.why[:60]})"
                              for s in item.slots if not s.in_service)
                self.history.add(LogLine(item.t, item.gateway.split("-")[0],
                                         f"gen {item.generation} in {ins} out {outs}"))
        elif isinstance(item, PollObs) and not item.ok:
            self.history.add(LogLine(item.t, item.gateway.split("-")[0],
                                     f"registry poll failed after {item.duration:.3f} s"))
        self.history.add(item)

    def check_processes(self) -> None:
        c = self.cluster
        assert c is not None
        for host in c.hosts:
            p = c.daemon_proc(host)
            if p is not None and not p.alive():
                what = f"daemon {host} exited on its own (exit {p.popen.returncode})"
                self.unexpected.append(what)
                self.say(what + ": started again")
                c.restart_daemon(host)
        for gid in c.gateway_ids:
            g = c.gateway_proc(gid)
            if g is not None and not g.alive() and gid not in self.expected_exit:
                what = f"gateway {gid} exited on its own (exit {g.popen.returncode})"
                self.unexpected.append(what)
                self.expected_exit.add(gid)
                self.say(what)

    def continuous(self) -> None:
        t0 = time.monotonic()
        res = check_all(self.history.frozen(), self.bounds, end=t0)
        self.check_time += time.monotonic() - t0
        for v in res.violations:
            if v.key() not in self.seen:
                self.seen.add(v.key())
                print(f"VIOLATION (continuous) {v.invariant}: {v.what}", flush=True)

    # ------------------------------------------------------------------ the run

    def run(self) -> int:
        args = self.args
        schedule = make_schedule(args.seed, args.faults, quick=args.quick,
                                 kinds=tuple(args.kinds.split(",")) if args.kinds else None,
                                 scale=self.timing.lease_ttl / 2)
        if args.no_netns:
            ok, why = False, "--no-netns given"
        else:
            ok, why = netns.available()
        self.mode = "netns" if ok else "loopback"
        self.mode_note = ("hosts are network namespaces on a bridge; partition = link down"
                          if ok else f"{why}: hosts are loopback processes; a partition is "
                          "SIGSTOP of all the host's processes")
        print(f"fault campaign: seed {args.seed}, {len(schedule)} faults, mode {self.mode} "
              f"({self.mode_note})", flush=True)
        work = Path(args.work_dir) if args.work_dir else Path(
            tempfile.mkdtemp(prefix="awide-faults-"))
        work.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        self.history.t0 = started
        spec = campaign_spec(gateways=args.gateways, timing=self.timing,
                             network="netns" if ok else "loopback", etcd_binary=args.etcd)
        self.cluster = EmbeddedCluster(work, spec, gateway_lines=self.take_line,
                                       ready_timeout=60.0)
        code = 2
        try:
            try:
                self.cluster.start()
            except Exception as e:  # noqa: BLE001 - reported with the logs' path
                print(f"the campaign cluster did not start: {e}\nlogs: {work / 'logs'}",
                      file=sys.stderr)
                return 2
            code = self._campaign(schedule, started, work)
        finally:
            if self.recorder is not None:
                self.recorder.stop()
            if self.ctx is not None:
                self.ctx.close()
            self.cluster.stop()
            if code == 0 and not args.keep:
                shutil.rmtree(work, ignore_errors=True)
            elif code != 2:
                print(f"work dir (logs, configs) kept: {work}")
        return code

    def _campaign(self, schedule, started: float, work: Path) -> int:
        c = self.cluster
        args = self.args
        assert c is not None
        self.history.gateways = c.gateway_ids
        for g in c.gateway_ids:
            self.history.tables.setdefault(g, [])
        self.history.expected_in = frozenset(c.card_id(k) for k in c.cards)
        for key in c.cards:
            if c.card(key).alt_id:
                self.history.add(TruthChange(started, c.card(key).alt_id, False, "not present"))
        self.recorder = Recorder(self.store_config(), self.history.add, c.names).start()
        t_ready, why = self.wait_agreed(60.0)
        if t_ready is None:
            print(f"the cluster did not settle (every card in, every gateway agreeing) "
                  f"within 60 s: {why}\nlogs: {work / 'logs'}", file=sys.stderr)
            return 2
        self.say(f"cluster ready after {t_ready - started:.1f} s: {len(c.cards)} cards, "
                 f"{len(c.gateway_ids)} gateways, mode {self.mode}")
        ctx = self.ctx = Ctx(cluster=c, history=self.history, say=self.say,
                             poll=self.timing.poll_interval)
        cap = self.bounds.agree * 2 + 5.0
        for fault in schedule:
            self.check_processes()
            t_ok, why = self.wait_agreed(cap)
            if t_ok is None:
                self.say(f"not settled before fault #{fault.index}: {why}")
            self.say(f"inject {fault.describe()}")
            made = inject(ctx, fault)
            self.history.add(made)
            if made.skipped:
                continue
            assert made.t_heal is not None, f"fault #{fault.index} was injected but not healed"
            t_agreed, why = self.settle(made.t_heal, cap, made.renamed)
            made.t_agreed = t_agreed
            made.leader_ok = self.leader_ok
            if t_agreed is None:
                self.say(f"#{fault.index} NOT agreed {cap:.1f} s after healing: {why}")
            else:
                self.say(f"#{fault.index} healed and agreed after "
                         f"{t_agreed - made.t_heal:.2f} s")
            if not args.quick or fault.index == len(schedule) - 1:
                self.continuous()
        # the last fault's late effects: settle once more, then read etcd's history again
        t_end, why = self.settle(time.monotonic(), cap)
        if t_end is None:
            self.say(f"not settled at the end: {why}")
        ended = time.monotonic()
        self.check_processes()
        assert self.recorder is not None
        self.recorder.stop()
        rec = self.history.frozen()
        try:
            events = replay(self.store_config(), dict(self.recorder.last), bound=30.0)
            source = "etcd history replayed from revision 1"
        except (TimeoutError, OSError) as e:
            events = rec.key_events
            source = f"continuous watch (the replay failed: {e})"
        live = sorted((e.revision, e.key) for e in rec.key_events)
        again = [(e.revision, e.key) for e in events]
        history_match = live == again
        history_diff = {"only_live": sorted(set(live) - set(again))[:20],
                        "only_replay": sorted(set(again) - set(live))[:20],
                        "live": len(live), "replay": len(again),
                        "live_dupes": len(live) - len(set(live))}
        rec = replace(rec, key_events=events)
        res = check_all(rec, self.bounds, end=ended)
        flaps = flap_outcomes(rec, self.bounds)
        t = self.timing
        replay_cmd = " ".join(
            ["python -m tests.faults.runner", f"--seed {args.seed}", f"--faults {args.faults}",
             "--quick" if args.quick else "", f"--timing {args.timing}",
             f"--kinds {args.kinds}" if args.kinds else "",
             f"--gateways {args.gateways}" if args.gateways != 4 else "",
             "--no-netns" if args.no_netns else "", "--report FILE"]).replace("  ", " ")
        report = build(
            seed=args.seed, requested=args.faults, quick=args.quick, mode=self.mode,
            mode_note=self.mode_note, rec=rec, result=res, bounds=self.bounds,
            timing={"poll_interval": t.poll_interval, "lease_ttl": t.lease_ttl,
                    "sick_polls": t.sick_polls, "healthy_polls": t.healthy_polls,
                    "call_timeout": t.call_timeout, "slack": SLACK,
                    "process_start": PROCESS_START},
            started=started, ended=ended, replay=replay_cmd,
            topology={"hosts": list(c.hosts), "storage": {h: [p.name for p in v] for h, v in
                                                          CARDS.items()},
                      "gateways": list(c.gateway_ids), "etcd_members": c.etcd.size,
                      "etcd_version": c.etcd.version},
            extra={"unexpected_exits": self.unexpected, "card_flap": flaps,
                   "continuous_check_s": round(self.check_time, 1), "history_source": source,
                   "history_match": history_match, "history_diff": history_diff,
                   "hand_writes": dict(Counter(w.key.split("/")[0] for w in rec.writes)),
                   "work_dir": str(work)})
        if args.report:
            Path(args.report).write_text(json.dumps(report, indent=1))
        # poison faults put hostile bytes in keys: nothing written or printed may choke on them
        (work / "events.log").write_text(
            "\n".join(line.render(started) for line in rec.log) + "\n", errors="backslashreplace")
        print(summary(report).encode("utf-8", "backslashreplace").decode("utf-8"), flush=True)
        if self.unexpected:
            print("UNEXPECTED EXITS: " + "; ".join(self.unexpected))
        if not history_match:
            print("the continuous watch and the replay of etcd's history differ")
        bad = res.violations or self.unexpected or not history_match
        return 1 if bad else 0


def flap_outcomes(rec, bounds: Bounds) -> dict[str, int]:
    """How many card_flap faults the registry rode out (the card stayed in) — informational:
    a stale report of jitter can legitimately complete a run of sick polls."""
    out = {"faults": 0, "card_taken_out": 0}
    injected = sorted(f.t_inject for f in rec.faults if not f.skipped)
    for f in rec.faults:
        if f.kind != "card_flap" or f.skipped or f.t_heal is None:
            continue
        out["faults"] += 1
        later = [t for t in injected if t > f.t_inject]
        end = min([f.t_heal + bounds.detect] + later[:1])   # not the next fault's effect
        if any(f.t_inject <= r.t <= end and r.generation is not None
               and any(c in f.cards for c, state in r.states if state != "in")
               for r in rec.registry):
            out["card_taken_out"] += 1
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m tests.faults.runner",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--faults", type=int, default=None,
                    help="how many faults (default 40; with --quick: one per kind)")
    ap.add_argument("--report", default="")
    ap.add_argument("--quick", action="store_true",
                    help="every fault kind once, short holds (the make test campaign)")
    ap.add_argument("--kinds", default="", help=f"comma-separated subset of: {', '.join(KINDS)}")
    ap.add_argument("--gateways", type=int, default=4)
    ap.add_argument("--timing", choices=sorted(TIMINGS), default="fast",
                    help="daemon and gateway timing (holds and bounds follow it)")
    ap.add_argument("--no-netns", action="store_true", help="loopback even when root")
    ap.add_argument("--etcd", default=None, help="etcd binary (default: etcd on PATH)")
    ap.add_argument("--work-dir", default="")
    ap.add_argument("--keep", action="store_true", help="keep the work dir even on success")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the event log live")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.faults is None:
        args.faults = 1 if args.quick else 40
    return Campaign(args).run()


if __name__ == "__main__":
    sys.exit(main())
