"""The fault campaign: real faults into a real cluster, invariants checked.

``python -m tests.faults.runner --seed N --faults K --report FILE [--quick]``; see
docs/reliability.md. The cluster is the harness's ``EmbeddedCluster`` (``awide_harness``: hosts
as network namespaces when root, an NVMe card, the instrumented gateways as a command
override); the modules here hold the campaign's own logic: ``schedule`` (faults from a seed),
``gateway_probe`` (instrumented gateways),
``recorder`` (etcd history), ``inject`` (making and healing faults), ``invariants`` (pure
checkers), ``report``, ``runner``.
"""
