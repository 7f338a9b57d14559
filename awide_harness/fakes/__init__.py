"""Fakes for what the test machines lack: NVMe devices and the kernel NVMe-oF initiator.

- ``awide_harness.fakes.world.FakeNvmeWorld``: a temp dir with a fake ``nvme`` (nvme-cli 2.3)
  on PATH, its JSON world file, its argv log and a fake sysfs tree.
- ``awide_harness.fakes.sysfs.FakeSysfs`` / ``FakeNs``: a builder for fake sysfs NVMe trees.
- ``awide_harness/fakes/fake_nvme.py``: the fake program itself.
- ``awide_harness.fakes.counted.CountedSysfs``: the real sysfs reader, its tree reads counted.

Nothing here needs pytest.
"""

from awide_harness.fakes.counted import CountedSysfs  # noqa: F401
from awide_harness.fakes.sysfs import FakeNs, FakeSysfs  # noqa: F401
from awide_harness.fakes.world import FakeNvmeWorld, install_python_program, pid_alive  # noqa: F401
