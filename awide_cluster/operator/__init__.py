"""The operator's view of a cluster: ``awide-cluster status`` / ``cards`` and the demo's live view.

- ``status``: ``build_status(raw, seen, policy) -> ClusterStatus``, pure;
- ``gather``: ``StatusReader(store, cluster=..., endpoints=...)`` with ``snapshot()`` (keeps
  report ages across reads: ``--watch``, the demo) and ``sample(interval)`` (one-shot);
- ``render``: ``render(status, "table"|"json"|"yaml")``, ``render_cards``;
- ``target``: which cluster and etcd, from a daemon/gateway config or the command line.

Live rendering (e.g. the demo)::

    reader = StatusReader(store, cluster="demo", endpoints=endpoints)
    while running:
        raw, st = await reader.snapshot()
        print(render(st, "table"))
        await asyncio.sleep(1)
"""
