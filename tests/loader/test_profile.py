"""Program.profile: GPU time per dispatch from timestamp queries (loader/execute/record.py)."""
import numpy as np
import pytest

from vkx.loader import load_graph

from .helpers import relu_add_graph, weights

pytestmark = pytest.mark.vulkan


def test_profile_times_every_dispatch_and_leaves_calls_working():
    w = weights()
    x = np.random.default_rng(3).standard_normal(1000).astype(np.float32)
    with load_graph(relu_add_graph(), [w.tobytes()]) as p:
        if not p.device.timestamp_bits:
            pytest.skip("this device's queue has no timestamps")
        ops = p.profile(x, runs=3)
        assert [(node, shader) for node, shader, _ in ops] == [
            ("node 0 (test.relu.default)", "test_relu"), ("node 1 (test.add.default)", "test_add")]
        assert all(0 < t < 1.0 for _, _, t in ops)
        np.testing.assert_array_equal(np.asarray(p(x)), np.maximum(x, 0) + w)  # the recorded buffer still runs


def test_gpu_seconds_times_a_whole_call():
    w = weights()
    x = np.random.default_rng(4).standard_normal(1000).astype(np.float32)
    with load_graph(relu_add_graph(), [w.tobytes()]) as p:
        if not p.has_timestamps:
            pytest.skip("this device's queue has no timestamps")
        whole = p.gpu_seconds(x, runs=3)
        parts = sum(t for _, _, t in p.profile(x, runs=3))
        assert 0 < whole < 1.0 and 0 < parts < 1.0
        np.testing.assert_array_equal(np.asarray(p(x)), np.maximum(x, 0) + w)
