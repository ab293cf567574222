"""The suite cannot pass by skipping: where no Vulkan device opens, a run stops before collecting with
one line saying what was tried and why it failed; only VKX_TESTS_ALLOW_NO_DEVICE=1 turns that into
skips, each listed with its reason.

Each run is a pytest in a child process whose Vulkan loader is pointed at a driver file that does
not exist (VK_DRIVER_FILES, and VK_ICD_FILENAMES for older loaders)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IN_PROCESS = "tests/loader/test_device.py::test_default_device_limits"  # opens the device itself
IN_A_CHILD = "tests/cli/test_no_torch.py::test_load_and_call_with_numpy_without_torch"  # marked `vulkan`


def pytest_without_a_device(allow: bool) -> subprocess.CompletedProcess:
    missing = str(ROOT / "no-such-driver.json")
    env = {**os.environ, "VK_DRIVER_FILES": missing, "VK_ICD_FILENAMES": missing}
    env.pop("VKX_TESTS_ALLOW_NO_DEVICE", None)
    if allow:
        env["VKX_TESTS_ALLOW_NO_DEVICE"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", IN_PROCESS, IN_A_CHILD],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


def test_without_a_device_the_run_fails_at_start_saying_why():
    done = pytest_without_a_device(allow=False)
    assert done.returncode == 4, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ERROR: vkx's tests need a Vulkan device: "), done.stderr
    line = lines[0]
    assert "opening vkx's default Vulkan device" in line and "VK_DRIVER_FILES=" in line  # what was tried
    assert "DeviceError: Vulkan device setup failed" in line  # why it failed
    assert "VKX_TESTS_ALLOW_NO_DEVICE=1" in line
    assert "passed" not in done.stdout and "skipped" not in done.stdout  # nothing ran


def test_skipping_without_a_device_is_allowed_only_when_asked_and_listed():
    done = pytest_without_a_device(allow=True)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    assert done.stdout.splitlines()[-1].startswith("2 skipped"), done.stdout
    reasons = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(reasons) == 2, done.stdout  # -ra: one line each, the test's place and the reason
    for line in reasons:
        assert "needs a Vulkan device (VKX_TESTS_ALLOW_NO_DEVICE=1)" in line and "DeviceError" in line, line
