"""The fault campaign: real faults into a real cluster, invariants checked.

``python -m tests.faults.runner --seed N --faults K --report FILE [--quick]``; see
docs/reliability.md. Modules: ``schedule`` (faults from a seed), ``topology`` (the cluster),
``netns`` (hosts as network namespaces), ``gateway_probe`` (instrumented gateways),
``recorder`` (etcd history), ``inject`` (making and healing faults), ``invariants`` (pure
checkers), ``report``, ``runner``.
"""
