"""The daemon's operator surface: HTTP API, Prometheus metrics, systemd notification.

Modules: ``health`` (``DaemonHealth``: liveness and readiness), ``metrics``
(``DaemonMetrics``), ``notify`` (``Notifier``: sd_notify), ``server`` (``DaemonApi``),
``view`` (``host_view``: the ``/v1/status`` document). How the daemon wires them (see
docs/operations.md, "Daemon HTTP API")::

    health = DaemonHealth.for_timing(cfg.timing.poll_interval, cfg.etcd.call_timeout)
    metrics = DaemonMetrics(host=cfg.host, role=cfg.role, version=__version__,
                            cluster=cfg.cluster)
    api = DaemonApi(health=health, metrics=metrics, view=lambda: host_view(...),
                    listen=cfg.api.listen)
    notifier = Notifier()
    await api.start()
    ...  # first successful report written
    notifier.ready(status="...")
    while running:                       # the main loop, one turn per poll
        ...
        health.beat(); notifier.watchdog()
    notifier.stopping(); await api.stop()
"""
