"""The ``awide-cluster`` command. Subcommands live in sibling modules that register on ``cli``:
``daemon`` (run, check-config, drain/undrain/forget), ``gateway`` (gateway check-config/watch),
``operator`` (status, cards, backup), ``history``, ``access`` (etcd users and roles). The
demo cluster runs from a source checkout (``make demo``)."""

from __future__ import annotations

import importlib

import click

from awide_cluster import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="awide-cluster")
def cli() -> None:
    """Control plane of the ADP KV-cache card cluster."""


for _name in ("daemon", "gateway", "operator", "history_command", "access"):
    try:
        importlib.import_module(f"awide_cluster.cli.{_name}")
    except ModuleNotFoundError as _e:  # a part not written yet
        if _e.name != f"awide_cluster.cli.{_name}":
            raise


def main() -> None:
    cli(prog_name="awide-cluster")
