"""The awide-cluster daemon (docs/architecture.md). Public names::

    from awide_cluster.daemon.service import Daemon, run_daemon      # composition root
    from awide_cluster.daemon.reconcile import decide                # the leader's decision
    from awide_cluster.daemon.intents import submit, resolve         # operator intents

Importing this package has no side effects.
"""
