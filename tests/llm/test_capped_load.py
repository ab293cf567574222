"""ExecuTorch PR #13501's blackout as a test: under a memory cap that the new load order fits and
the old one does not, the old order fails with vkx's out-of-memory error and the new one loads and
generates (bench/llama_load.py does both in fresh processes; the 1B model is its default).

The cap is RLIMIT_DATA of 1.5 W above the process once its device is up: the old order needs
more than 2 W; the new one W plus fixed costs (state, activations and io in blocks of 4 MiB, the
driver's own allocations: about 35 MB), which is why the model is not smaller (W = 155 MB)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.vulkan
CAP = 1.5

_spec = importlib.util.spec_from_file_location("llama_load", Path(__file__).parents[2] / "bench" / "llama_load.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    out = tmp_path_factory.mktemp("capped")
    bench.write_folder(out / "model", {**bench.SMALL, "hidden_size": 1024, "num_attention_heads": 16,
                                        "num_key_value_heads": 4, "intermediate_size": 2816})
    return bench.export_both(out / "model", out, max_seq_len=64, prefill_len=8)


def test_the_old_order_runs_out_of_memory_where_the_new_one_generates(files):
    new, old, weights = files
    assert weights > 140 << 20
    cap = int(CAP * weights)
    free = bench.run_child(new, "lazy", 0, 8)
    assert "error" not in free, free["error"]
    capped_new = bench.run_child(new, "lazy", cap, 8)
    assert "error" not in capped_new, capped_new["error"]
    assert capped_new["tokens"] == free["tokens"]  # the cap changes nothing but the memory
    assert "error" not in bench.run_child(old, "eager", 0, 0)  # the old order loads without the cap...
    capped_old = bench.run_child(old, "eager", cap, 0)
    assert capped_old.get("error", "").startswith(("OutOfHostMemoryError", "OutOfDeviceMemoryError")), capped_old


def test_the_phase_table_has_the_prs_boundaries(files):
    new, _, _ = files
    report = bench.run_child(new, "lazy", 0, 0)
    table = bench.phase_table(report)
    for phase in ("before load", "after graph build", "prepack start", "after prepack", "after execute"):
        assert phase in table
