"""The ``awide-cluster`` command. Subcommands live in sibling modules that register on ``cli``:
``daemon`` (run, check-config, drain/undrain/forget), ``gateway`` (gateway check-config/watch),
``operator`` (status, cards, backup), ``history``, ``leader`` (switchover), ``access`` (etcd
users and roles). The demo cluster runs from a source checkout (``make demo``).

Every call imports all the subcommand modules (to know the commands), so they import at their
top only click and the light constants they declare options with (``cli/lookup.py``,
``operator/formats.py``, ``contract/bounds.py``): a command imports what it runs (the config
parser and pydantic, the store and aiohttp, the operator's model, the daemon's modules) in its
handler. ``awide-cluster --help`` and a usage error so load none of it."""

from __future__ import annotations

import importlib
from typing import Any

import click

from awide_cluster import __version__
from awide_cluster.cli.lookup import EXIT_USAGE


class Commands(click.Group):
    """click's group with its usage errors (a bad option, a missing argument) exiting 64,
    sysexits' EX_USAGE, instead of click's 2: 2 is CRITICAL in the Nagios plugin convention
    the checks (status, cards) follow."""

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as e:
            setattr(e, "exit_code", EXIT_USAGE)     # noqa: B010  (a class variable in click)
            raise

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            setattr(e, "exit_code", EXIT_USAGE)     # noqa: B010  (a class variable in click)
            raise


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="awide-cluster")
def cli() -> None:
    """Control plane of the ADP KV-cache card cluster."""


for _name in ("daemon", "gateway", "operator", "history_command", "access", "windows", "leader",
              "namespace"):
    try:
        importlib.import_module(f"awide_cluster.cli.{_name}")
    except ModuleNotFoundError as _e:  # a part not written yet
        if _e.name != f"awide_cluster.cli.{_name}":
            raise


def main() -> None:
    cli(prog_name="awide-cluster")
