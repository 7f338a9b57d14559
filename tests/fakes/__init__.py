"""Fakes for what the test machines lack: NVMe devices and the kernel NVMe-oF initiator.

- ``tests.fakes.world.FakeNvmeWorld``: a temp dir with a fake ``nvme`` (nvme-cli 2.3) on PATH,
  its JSON world file, its argv log and a fake sysfs tree.
- ``tests.fakes.sysfs.FakeSysfs`` / ``FakeNs``: a builder for fake sysfs NVMe trees.
- ``tests/fakes/fake_nvme.py``: the fake program itself.

Nothing here needs pytest.
"""

from tests.fakes.sysfs import FakeNs, FakeSysfs  # noqa: F401
from tests.fakes.world import FakeNvmeWorld, install_python_program, pid_alive  # noqa: F401
