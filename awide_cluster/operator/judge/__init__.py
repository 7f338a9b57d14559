"""The status judgement, one module per part of the cluster, each a set of small pure
functions from frozen values to a view and its problems: ``etcd`` (members, quorum, alarms),
``daemons`` (leader key, registry, host reports, refused writes), ``cards``, ``gateways``
(gateway records, layouts, intents). ``awide_cluster.operator.status.build_status`` runs them."""
