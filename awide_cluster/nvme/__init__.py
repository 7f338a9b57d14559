"""NVMe: validated targets, a bounded subprocess runner, nvme-cli 2.3 wrapper and parsers,
sysfs discovery. See docs/cards.md. Public names::

    from awide_cluster.nvme import NvmeTarget, InvalidTarget, Runner, NvmeCli, Sysfs
"""

from awide_cluster.contract.target import (
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
from awide_cluster.nvme.cli import NvmeCli
from awide_cluster.nvme.dhchap import BadSecret, DhchapSecret, parse_secret, read_secret_file
from awide_cluster.nvme.errors import (
    AlreadyConnected,
    ConnectFailed,
    DisconnectFailed,
    NvmeCommandFailed,
    NvmeError,
    NvmeParseError,
)
from awide_cluster.nvme.parse import (
    Address,
    ControllerIdentity,
    ListedNamespace,
    NamespaceIdentity,
    SubsysPath,
    Subsystem,
    namespace_identity,
)
from awide_cluster.nvme.runner import (
    CommandRunner,
    CommandTimeout,
    Completed,
    OutputTooLarge,
    ProgramNotFound,
    ProgramNotRunnable,
    Runner,
    RunnerError,
    SecretArg,
)
from awide_cluster.nvme.sysfs import Controller, Namespace, Sysfs

__all__ = [
    "Address", "AlreadyConnected", "BadSecret", "DhchapSecret", "parse_secret",
    "read_secret_file", "SecretArg", "clean_firmware", "clean_model", "clean_serial",
    "CommandRunner", "CommandTimeout", "Completed", "ConnectFailed", "Controller",
    "ControllerIdentity", "DisconnectFailed", "InvalidDeviceName", "InvalidIdentityString",
    "InvalidTarget", "ListedNamespace", "Namespace", "namespace_identity", "NamespaceIdentity",
    "NvmeCli", "NvmeCommandFailed", "NvmeError", "NvmeParseError", "NvmeTarget", "OutputTooLarge",
    "ProgramNotFound", "ProgramNotRunnable", "Runner", "RunnerError", "SubsysPath", "Subsystem",
    "Sysfs", "validate_device_name", "validate_nqn", "validate_traddr", "validate_transport",
    "validate_trsvcid",
]
