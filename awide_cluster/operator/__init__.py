"""The operator's view of a cluster: ``awide-cluster status`` / ``cards`` and the demo's live view.

- ``status``: ``build_status(raw, seen, policy) -> ClusterStatus``, pure;
- ``gather``: ``StatusReader(store, cluster=..., endpoints=...)`` with ``snapshot()`` (keeps
  report ages across reads: ``--watch``, the demo) and ``sample(interval)`` (one-shot);
- ``render``: ``render(status, "table"|"json"|"yaml")``, ``render_cards``;
- ``target``: which cluster and etcd: one lookup for every command (``--config``,
  ``--endpoints``, ``$AWIDE_CONFIG``, ``$AWIDE_ETCD_ENDPOINTS``, ``DEFAULT_CONFIG``);
- ``clusters``: the cluster names an etcd holds (bounded), for "no such cluster".
- ``backup``: ``take_snapshot(store, path)``, a snapshot of one etcd member written
  atomically and checked (``awide-cluster backup``).

Live rendering (e.g. the demo)::

    reader = StatusReader(store, cluster="demo", endpoints=endpoints)
    while running:
        raw, st = await reader.snapshot()
        print(render(st, "table"))
        await asyncio.sleep(1)
"""
