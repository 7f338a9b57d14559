"""The daemon's operator surface: HTTP API, Prometheus metrics, systemd notification.

How the daemon wires it (see docs/operations.md, "Daemon HTTP API")::

    health = DaemonHealth.for_timing(cfg.timing.poll_interval, cfg.etcd.call_timeout)
    metrics = DaemonMetrics(host=cfg.host, role=cfg.role, version=__version__)
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

from awide_cluster.api.health import DaemonHealth, HealthMarks, Verdict  # noqa: F401
from awide_cluster.api.metrics import DaemonMetrics  # noqa: F401
from awide_cluster.api.notify import Notifier, NotifyError  # noqa: F401
from awide_cluster.api.server import DEFAULT_LISTEN, ApiError, DaemonApi, parse_listen  # noqa: F401
from awide_cluster.api.view import host_view  # noqa: F401
