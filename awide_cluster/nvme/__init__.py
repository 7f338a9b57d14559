"""NVMe: validated targets, a bounded subprocess runner, nvme-cli 2.3 wrapper and parsers,
sysfs discovery. See docs/cards.md. Public names::

    from awide_cluster.nvme import NvmeTarget, InvalidTarget, Runner, NvmeCli, Sysfs
"""

from awide_cluster.nvme.cli import NvmeCli  # noqa: F401
from awide_cluster.nvme.errors import (  # noqa: F401
    AlreadyConnected,
    ConnectFailed,
    DisconnectFailed,
    NvmeCommandFailed,
    NvmeError,
    NvmeParseError,
)
from awide_cluster.nvme.parse import (  # noqa: F401
    Address,
    ControllerIdentity,
    ListedNamespace,
    NamespaceIdentity,
    SubsysPath,
    Subsystem,
    namespace_identity,
)
from awide_cluster.nvme.runner import (  # noqa: F401
    CommandRunner,
    CommandTimeout,
    Completed,
    OutputTooLarge,
    ProgramNotFound,
    ProgramNotRunnable,
    Runner,
    RunnerError,
)
from awide_cluster.nvme.sysfs import Controller, Namespace, Sysfs  # noqa: F401
from awide_cluster.nvme.target import (  # noqa: F401
    InvalidDeviceName,
    InvalidIdentityString,
    InvalidTarget,
    NvmeTarget,
    clean_firmware,
    clean_model,
    clean_serial,
    validate_device_name,
    validate_nqn,
    validate_traddr,
    validate_transport,
    validate_trsvcid,
)
