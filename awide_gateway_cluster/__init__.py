"""awide_gateway_cluster: the library a KV-cache gateway uses in ``mode: cluster``.

It follows the card registry in etcd with bounded polls, computes the same 8-slot table as
every other gateway, connects cards with nvme-cli, and keeps serving from the last known state
when etcd or a card fails. See docs/gateway.md.

    from awide_gateway_cluster import ClusterGateway, load_config

    gw = ClusterGateway(load_config("gateway.yaml"))
    await gw.start()
    choice = gw.placement.dialog(tag)      # CardChoice: card, device, available, keys

Importing this package has no side effects: no grpc/protobuf, no sys.path, logging
configuration or signal handlers are touched.
"""

from awide_gateway_cluster.config import ConfigError, GatewayConfig, load_config, parse_config
from awide_gateway_cluster.errors import EngineRefused, GatewayError, NotStarted, WipeRefused
from awide_gateway_cluster.events import ChangeEvent
from awide_gateway_cluster.gateway import ClusterGateway
from awide_gateway_cluster.layout import (
    CardSetMismatch,
    FormatTooNew,
    LayoutMismatch,
    namespace,
    object_key,
)
from awide_gateway_cluster.placement import CardChoice, Placement, StripePlacement
from awide_gateway_cluster.stats import GatewayStats
from awide_gateway_cluster.threaded import ThreadedClusterGateway
from awide_gateway_cluster.view import SlotState, SlotView

__all__ = [
    "CardChoice", "CardSetMismatch", "ChangeEvent", "ClusterGateway", "ConfigError",
    "EngineRefused", "FormatTooNew", "GatewayConfig", "GatewayError", "GatewayStats",
    "LayoutMismatch", "NotStarted",
    "Placement", "SlotState", "SlotView", "StripePlacement", "ThreadedClusterGateway",
    "WipeRefused", "load_config", "namespace", "object_key", "parse_config",
]
