"""CPU quotas on the machine's real cgroups: what bench/bench_scaling.py gives each worker."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest

from tidemark.local.cpu_quota import CpuQuota, QuotaUnavailable, cpu_controller

pytestmark = pytest.mark.integration

# a parent that, once told to, starts two children spinning beside itself: three busy processes
SPINNERS = """
import subprocess, sys
sys.stdin.readline()
children = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
while True:
    pass
"""


def _controller():
    try:
        return cpu_controller()
    except QuotaUnavailable as exc:
        pytest.fail(f"the bench's quotas need a writable cpu controller here: {exc}")


def test_a_quota_caps_a_process_and_the_children_it_starts_later():
    quota = CpuQuota(_controller(), f"test-{uuid.uuid4().hex[:8]}", cores=0.25)
    parent = subprocess.Popen([sys.executable, "-c", SPINNERS], stdin=subprocess.PIPE)
    try:
        assert quota.add(parent.pid)
        parent.stdin.write(b"go\n")
        parent.stdin.flush()
        time.sleep(0.5)
        assert len(quota.pids()) == 3  # the children were born in the group
        used_before, periods_before, started = quota.usage_s(), quota.periods(), time.monotonic()
        time.sleep(2.0)
        rate = (quota.usage_s() - used_before) / (time.monotonic() - started)
        # three spinning processes held to a quarter of a CPU (less when the machine is busier
        # than that: the quota is a cap, not a reservation)
        assert 0.01 < rate < 0.35, rate
        periods, throttled = (after - before for after, before in zip(quota.periods(), periods_before))
        assert periods >= 10 and throttled > 0  # the cap held them back in some 100 ms periods
    finally:
        quota.close()
        subprocess.run(["pkill", "-KILL", "-P", str(parent.pid)], check=False)  # before they lose their parent
        parent.kill()
        parent.wait()
    assert not quota.dirs[0].exists()


def test_a_gone_process_is_not_added_and_a_quota_needs_cores():
    controller = _controller()
    with pytest.raises(ValueError, match="cores > 0"):
        CpuQuota(controller, "never", cores=0)
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    with CpuQuota(controller, f"test-{uuid.uuid4().hex[:8]}", cores=0.5) as quota:
        assert not quota.add(int(done.stdout))
        assert quota.pids() == []
