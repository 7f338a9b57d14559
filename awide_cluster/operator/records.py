"""The records status shows but does not own (``leader``, ``gateways/<id>``,
``layouts/<namespace>``, ``intents/<card>``): their one implementation is
``awide_cluster.contract.records``; this module names it for the operator code."""

from awide_cluster.contract.records import (  # noqa: F401
    GatewayRecord,
    GatewayRecordError,
    IntentRecord,
    IntentRecordError,
    LayoutRecord,
    LayoutRecordError,
    LeaderRecord,
    LeaderRecordError,
    RecordError,
    decode_gateway,
    decode_intent,
    decode_layout,
    decode_leader,
    iso,
    parse_time,
)
