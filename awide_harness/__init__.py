"""Real etcd members started on loopback, for tests, the operator demo and benchmarks.

Nothing here imports pytest. See ``etcd_cluster.EtcdCluster``.
"""

from awide_harness.certs import TestPki, make_test_pki  # noqa: F401
from awide_harness.etcd_cluster import (  # noqa: F401
    ClusterTls,
    EtcdCluster,
    EtcdClusterError,
    MemberInfo,
    etcd_version,
    find_etcd,
)
