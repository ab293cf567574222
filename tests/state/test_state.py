"""State that lives on the GPU across calls: vkx's outputs, call after call, equal torch's module
called the same way (its buffers mutated in place)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import vkx
from vkx.export.errors import ExportError
from vkx.format import ProgramFile, describe, validate
from vkx.loader.errors import InputError

from tests.data.et_models import MLP

from .models import EXAMPLES, Accumulator, RingBuffer, RunningSum, decode_inputs, decoder, prefill_inputs

DATA = Path(__file__).resolve().parents[1] / "data"


def test_running_sum_over_32_calls(tmp_path):
    path = tmp_path / "sum.pte"
    vkx.export_model(RunningSum(), (torch.randn(4, 8),), path)
    reference = RunningSum()
    torch.manual_seed(0)
    with vkx.load(path) as program:
        assert program.states == ["total"]
        for _ in range(32):
            x = torch.randn(4, 8) * 3
            torch.testing.assert_close(program(x), reference(x), rtol=1e-6, atol=1e-5)
        torch.testing.assert_close(program.state("total"), reference.total, rtol=1e-6, atol=1e-5)
        assert reference.total.abs().max() > 5  # 32 steps of real magnitude
        program.reset()
        assert torch.equal(program.state("total"), torch.zeros(4, 8))
        x = torch.randn(4, 8)
        torch.testing.assert_close(program(x), 2 * x)


def test_ring_buffer_index_put_at_an_input_position(tmp_path):
    path = tmp_path / "ring.pte"
    vkx.export_model(RingBuffer(), (torch.randn(1, 6), torch.tensor([0])), path)
    ops = {call.name for call in ProgramFile.open(path).vulkan.graph.chain}
    assert {"vkx.state.default", "vkx.index_copy.default"} <= ops
    reference = RingBuffer()
    torch.manual_seed(1)
    with vkx.load(path) as program:
        start = program.state("ring")
        assert torch.equal(start, torch.full((5, 6), 0.5))  # the initial value is a constant
        for step in range(32):
            x, slot = torch.randn(1, 6), torch.tensor([step % 5])
            torch.testing.assert_close(program(x, slot), reference(x, slot), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(program.state("ring"), reference.ring)
        program.reset()
        assert torch.equal(program.state("ring"), start)


@pytest.fixture(scope="module")
def two_methods(tmp_path_factory):
    directory = tmp_path_factory.mktemp("methods")
    model = decoder()
    both = directory / "decoder.pte"
    report = vkx.export_model(model, {"prefill": prefill_inputs(), "decode": decode_inputs(8)}, both)
    one = directory / "decode_only.pte"
    single = vkx.export_model(model, {"decode": decode_inputs(8)}, one)
    return both, report, one, single


def test_decoder_two_methods_step_by_step(two_methods):
    path, report, _, _ = two_methods
    assert report.methods == ["prefill", "decode"]
    reference = decoder()
    torch.manual_seed(2)
    ids, positions = prefill_inputs()
    with vkx.load(path) as program, torch.no_grad():
        assert program.methods == ["prefill", "decode"]
        assert len(program.states) == 4  # k and v of two layers, shared by both methods
        want = reference(ids, positions)
        torch.testing.assert_close(program.prefill(ids, positions), want, rtol=1e-4, atol=1e-4)
        for position in range(8, 8 + 32):
            token = torch.randint(0, 64, (1, 1))
            want = reference(token, torch.tensor([position]))
            got = program["decode"](token, torch.tensor([position]))
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        assert want.abs().max() > 1
        torch.testing.assert_close(program.state("layers.1.v_cache"), reference.layers[1].v_cache,
                                   rtol=1e-4, atol=1e-5)
        # a new sequence after reset: the same outputs as a fresh torch model
        program.reset()
        fresh = decoder()
        torch.testing.assert_close(program.prefill(ids, positions), fresh(ids, positions), rtol=1e-4, atol=1e-4)
        with pytest.raises(InputError, match="no method 'generate'"):
            program["generate"]
        with pytest.raises(InputError, match="no state 'cache'"):
            program.state("cache")


def test_methods_share_weights(two_methods):
    both, report, one, single = two_methods
    assert report.constant_bytes == single.constant_bytes  # each weight stored once
    d = describe(both)
    assert [m["name"] for m in d["methods"]] == ["prefill", "decode"]
    assert d["totals"]["W"] == describe(one)["totals"]["W"] == report.constant_bytes
    assert validate(both).delegates == 2
    with vkx.load(one) as program:
        one_method = program.memory["ledger"]["peak"]["weights"]  # W, rounded to the pool's blocks
    with vkx.load(both) as program:
        assert program.weight_bytes == report.constant_bytes
        assert program.memory["ledger"]["peak"]["weights"] == one_method  # the weights once, not per method


def test_executorch_reads_the_two_method_file(two_methods):
    path = two_methods[0]
    from executorch.exir._serialize._program import deserialize_pte_binary
    from executorch.runtime import Runtime, Verification
    pte = deserialize_pte_binary(path.read_bytes())
    assert [plan.name for plan in pte.program.execution_plan] == ["prefill", "decode"]
    delegates = [plan.delegates[0].processed.index for plan in pte.program.execution_plan]
    assert [d.id for plan in pte.program.execution_plan for d in plan.delegates] == ["VulkanBackend"] * 2
    assert len(set(delegates)) == 2  # a graph each, one named-data map for both
    with ProgramFile.open(path) as pf:
        keys = {c.named_key for v in pf.vulkan_delegates for c in v.graph.constants if c.is_named}
    assert set(pte.named_data.pte_data) == keys
    program = Runtime.get().load_program(path.read_bytes(), verification=Verification.InternalConsistency)
    assert set(program.method_names) == {"prefill", "decode"}


def test_reading_old_state_after_its_update_is_refused(tmp_path):
    class Stale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("cache", torch.zeros(4, 3))

        def forward(self, x, position):
            old = self.cache.clone()
            self.cache.index_copy_(0, position, x)
            return old + 1

    class StaleOutput(Stale):
        def forward(self, x, position):
            old = self.cache.clone()
            self.cache.index_copy_(0, position, x)
            return old

    for model in (Stale(), StaleOutput()):
        with pytest.raises(ExportError, match="old content of state cache"):
            vkx.export_model(model, (torch.randn(1, 3), torch.tensor([1])), tmp_path / "stale.pte")


def test_methods_of_different_functions_share_state(tmp_path):
    """`(callable, inputs)`: `read` is another function of the module; it sees what `forward` added."""
    module = Accumulator()
    path = tmp_path / "acc.pte"
    report = vkx.export_model(module, {"add": (torch.randn(4, 8),), "read": (module.read, (torch.randn(1, 8),))}, path)
    assert report.methods == ["add", "read"]
    assert [x["methods"] for x in describe(path)["states"]] == [["add", "read"]]
    reference = Accumulator()
    torch.manual_seed(3)
    with vkx.load(path) as program:
        for _ in range(32):
            x, scale = torch.randn(4, 8), torch.randn(1, 8)
            torch.testing.assert_close(program.add(x), reference(x), rtol=1e-6, atol=1e-5)
            torch.testing.assert_close(program.read(scale), reference.read(scale), rtol=1e-6, atol=1e-5)


def test_cli_exports_inspects_and_runs_the_example(tmp_path):
    from tests.cli.conftest import one_error_line, vkx as run_vkx, vkx_here
    path = tmp_path / "decoder.pte"
    done = vkx_here("export", EXAMPLES / "kv_decoder.py", "-q", "-o", path)
    assert done.returncode == 0, done.stderr
    shown = run_vkx("inspect", path)
    assert shown.returncode == 0 and "Methods" in shown.stdout and "State" in shown.stdout
    report = json.loads(run_vkx("inspect", path, "--json").stdout)
    assert [m["name"] for m in report["methods"]] == ["prefill", "decode"]
    assert len(report["states"]) == 4 and report["totals"]["state"] == sum(x["bytes"] for x in report["states"])
    ran = run_vkx("run", path, "--method", "decode", "--repeat", "2", "--json", "-q")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["method"] == "decode"
    assert "pass --method NAME" in one_error_line(run_vkx("run", path, "-q"))
    assert "no method 'generate'" in one_error_line(run_vkx("run", path, "-q", "--method", "generate"))


def test_executorch_two_method_file_runs():
    """tests/data/make_et_methods_file.py: ExecuTorch 1.5.1's own file of two methods sharing weights."""
    torch.manual_seed(0)
    model = MLP().eval()
    path = DATA / "et_mlp_methods.pte"
    d = describe(path)
    assert [m["name"] for m in d["methods"]] == ["four", "one"]
    assert set(d["methods"][0]["constants"]) == set(d["methods"][1]["constants"])
    with vkx.load(path) as program, torch.no_grad():
        assert program.weight_bytes == d["totals"]["W"]
        for batch, name in ((1, "one"), (4, "four")):
            x = torch.randn(batch, 8)
            torch.testing.assert_close(program[name](x), model(x), rtol=1e-5, atol=1e-5)


class SliceAndCopy(torch.nn.Module):
    """Slice assignment at constant bounds (slice_scatter) and copy_ into a second buffer."""

    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(2, 6, 3))
        self.register_buffer("last", torch.zeros(2, 3))

    def forward(self, x):
        self.buf[:, 1:3] = x
        self.last.copy_(x[:, 0])
        return self.buf.sum(1) + self.last


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_slice_assignment_and_copy(tmp_path, dtype):
    path = tmp_path / "slice.pte"
    vkx.export_model(SliceAndCopy(), (torch.randn(2, 2, 3),), path, dtype=dtype)
    want_dtype = torch.float16 if dtype == "fp16" else torch.float32
    reference = SliceAndCopy().to(want_dtype)
    torch.manual_seed(4)
    with vkx.load(path) as program:
        for _ in range(4):
            x = (torch.randn(2, 2, 3) * 3).to(want_dtype)
            torch.testing.assert_close(program(x), reference(x))
        assert program.state("buf").dtype == want_dtype
        torch.testing.assert_close(program.state("last"), reference.last)


def test_an_update_of_a_tensor_that_is_not_state_is_refused(tmp_path):
    class IntoInput(torch.nn.Module):
        def forward(self, base, x, position):
            return base.index_copy(0, position, x)

    with pytest.raises(ExportError, match="updates model state .* in place"):
        vkx.export_model(IntoInput(), (torch.zeros(4, 3), torch.randn(1, 3), torch.tensor([1])), tmp_path / "x.pte")


class PutCache(torch.nn.Module):
    """cache[:, :, position] = k: index_put along dim 2 at positions from an input tensor."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 2, 10, 4))

    def forward(self, k, position):
        self.cache[:, :, position] = k
        return self.cache.sum(2)


def test_index_put_along_a_later_dim(tmp_path):
    path = tmp_path / "put.pte"
    vkx.export_model(PutCache(), (torch.randn(1, 2, 3, 4), torch.arange(3)), path)
    reference = PutCache()
    torch.manual_seed(5)
    with vkx.load(path) as program:
        for step in range(6):
            k, position = torch.randn(1, 2, 3, 4), torch.tensor([step, (step + 3) % 10, (step + 6) % 10])
            torch.testing.assert_close(program(k, position), reference(k, position), rtol=1e-6, atol=1e-5)
        torch.testing.assert_close(program.state("cache"), reference.cache)
