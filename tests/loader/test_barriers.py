"""Dependency-aware barriers (loader/execute/hazards.py): a barrier only before a dispatch that depends on
an earlier one, checked by the validation layer's synchronization validation."""
import os
import subprocess
import sys
import textwrap

import pytest

from vkx.loader.execute.hazards import binding_access
from vkx.loader.gpu.spirv import glslc

pytestmark = pytest.mark.vulkan

# Two independent products then their sum: the second product needs no barrier, the sum one.
_PROBE = textwrap.dedent("""
    import os, sys
    import numpy as np, torch
    import vkx
    import vkx.loader.execute.record as record
    from vkx.export import export_model
    if sys.argv[2] == "none":
        record.barriers_before = lambda dispatches: [False] * len(dispatches)
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(64, 48), torch.nn.Linear(64, 48)
        def forward(self, x):
            return torch.relu(self.a(x)) + self.b(x) * 2
    torch.manual_seed(0)
    m = M().eval()
    x = torch.randn(1, 64)
    path = os.path.join(sys.argv[1], "m.pte")
    export_model(m, (x,), path)
    with vkx.load(path) as p:
        got = p(x)
        print(p.dispatch_count, p.barrier_count)
        torch.testing.assert_close(got, m(x), rtol=1e-5, atol=1e-5)
""")


def _run(tmp_path, mode: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "VKX_VALIDATION": "1",
           "VK_LAYER_ENABLES": "VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT"}
    return subprocess.run([sys.executable, "-c", _PROBE, str(tmp_path), mode], capture_output=True, text=True,
                          env=env, timeout=600)


def test_barriers_only_where_a_dispatch_depends_and_sync_validation_is_clean(tmp_path):
    done = _run(tmp_path, "hazards")
    assert done.returncode == 0, done.stderr[-2000:]
    dispatches, barriers = map(int, done.stdout.split()[-2:])
    assert dispatches >= 4 and 0 < barriers < dispatches


def test_sync_validation_sees_a_missing_barrier(tmp_path):
    """The control: the same program recorded without barriers is reported (the check above can fail)."""
    done = _run(tmp_path, "none")
    assert done.returncode != 0 and "SYNC-HAZARD-READ-AFTER-WRITE" in done.stderr


def test_binding_access_comes_from_the_spirv(tmp_path):
    source = tmp_path / "probe.comp"
    source.write_text(textwrap.dedent("""
        #version 450
        layout(local_size_x = 64) in;
        layout(std430, set = 0, binding = 0) readonly buffer A { float a[]; };
        layout(std430, set = 0, binding = 1) writeonly buffer B { float b[]; };
        layout(std430, set = 0, binding = 2) buffer C { float c[]; };
        layout(std430, set = 0, binding = 3) readonly buffer D { float d[]; } named;
        void main() {
            uint i = gl_GlobalInvocationID.x;
            c[i] += a[i] + named.d[i];
            b[i] = c[i];
        }
    """))
    assert binding_access(glslc(source, {})) == {0: (True, False), 1: (False, True), 2: (True, True),
                                                  3: (True, False)}
