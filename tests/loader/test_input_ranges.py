"""An input that indexes memory (a token id into an embedding, a position into a KV cache, an index
of a gather) is checked on the host at every entry point: `vkx.load(...)` method calls, greedy
steps, ExecuTorch programs, `vkx run`. Before, the device read zeros or wrote nothing, silently."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import vkx
from tests.cli.conftest import one_error_line, vkx as run_vkx
from vkx.format import vkgraph as g
from vkx.format.indexing import IndexRange, index_ranges
from vkx.loader.errors import InputError
from vkx.loader.lm.greedy import Argmax, GreedyChain

pytestmark = pytest.mark.vulkan

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
VOCAB, CACHE = 64, 48  # examples/kv_decoder.py's


@pytest.fixture(scope="module")
def decoder(tmp_path_factory) -> Path:
    from vkx.export.model_file import load_model_file
    module, inputs = load_model_file(ROOT / "examples" / "kv_decoder.py")
    path = tmp_path_factory.mktemp("ranges") / "decoder.pte"
    vkx.export_model(module, inputs, str(path))
    return path


def test_the_ranges_are_found_statically(decoder):
    """Token ids reach the embedding; positions a position embedding and the caches (whose bound is named)."""
    with vkx.load(decoder) as program:
        ranges = index_ranges(program["decode"].graph)
    assert ranges[0] == IndexRange(0, 0, VOCAB, "token id", "the vocabulary")
    assert ranges[1] == IndexRange(1, 0, CACHE, "position", "the cache")


def test_method_calls_refuse_an_id_or_a_position_outside_its_table(decoder):
    with vkx.load(decoder) as program:
        decode = program["decode"]
        ok = decode.run_numpy(np.array([[VOCAB - 1]]), np.array([CACHE - 1]))[0]
        assert np.isfinite(ok).all()
        for ids, pos, message in [
                ([[VOCAB]], [0], f"input 0 (input_ids): token id {VOCAB} is outside the vocabulary (0..{VOCAB - 1})"),
                ([[-1]], [0], f"token id -1 is outside the vocabulary (0..{VOCAB - 1})"),
                ([[1]], [CACHE], f"input 1 (cache_position): position {CACHE} is outside the cache (0..{CACHE - 1})"),
                ([[1]], [2 ** 32], f"position {2 ** 32} is outside the cache")]:  # int64: no wrap to 0 on the way
            for call in (decode.run_numpy, decode, Argmax(decode)):
                with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
                    call(np.array(ids, np.int64), np.array(pos, np.int64))
        prefill = program["prefill"]
        n = prefill.input_specs[1].shape[0]
        positions = np.arange(n)
        positions[-1] = CACHE + 5
        with pytest.raises(InputError, match=f"position {CACHE + 5} is outside the cache"):
            prefill(np.zeros((1, n), np.int64), positions)
        # greedy steps write positions p .. p + steps - 1: the last must fit too
        GreedyChain(decode)(np.array([[1]]), np.array([CACHE - 3]), 3)
        with pytest.raises(InputError, match=f"position {CACHE} is outside the cache"):
            GreedyChain(decode)(np.array([[1]]), np.array([CACHE - 3]), 4)


def test_executorch_llm_positions_are_checked_with_the_steps_after_them():
    """ExecuTorch's recipe: positions input_pos[0] + arange(n) index the caches and the rotary table."""
    with vkx.load(DATA / "et_llama_4w.pte", sequence_length=1) as program:
        (ids, _), (pos, _) = program.input_specs
        length = next(r.high for r in index_ranges(program.only.graph) if r.what == "position")
        program(np.zeros(ids, np.int32), np.full(pos, length - 1, np.int32))
        with pytest.raises(InputError, match=f"position {length} is outside the cache"):
            program(np.zeros(ids, np.int32), np.full(pos, length, np.int32))
        with pytest.raises(InputError, match="token id 256 is outside the vocabulary"):
            program(np.full(ids, 256, np.int32), np.zeros(pos, np.int32))


def test_an_executorch_plan_checks_its_delegates_inputs():
    """et_phi3: CPU ops between delegates; the token ids are checked as they enter the embedding's delegate."""
    import torch
    with vkx.load(DATA / "et_phi3.pte") as program:
        with pytest.raises(InputError, match=r"token id 64 is outside the vocabulary \(0\.\.63\)"):
            program(torch.full((1, 16), 64, dtype=torch.long))


def test_a_gather_index_outside_its_dim_is_refused():
    path = DATA / "et_op_cases" / "gather-fp32.pte"
    with vkx.load(path) as program:
        (src_shape, _), (index_shape, dtype) = program.input_specs
        src = np.ones(src_shape, np.float32)
        program(src, np.full(index_shape, -5, dtype))  # negatives count from the end, as the shader does
        with pytest.raises(InputError, match=r"input 1: index 5 is outside the indexed dim \(-5\.\.4\)"):
            program(src, np.full(index_shape, 5, dtype))


def test_an_input_through_casts_and_views_is_traced():
    """Token ids [1, 4] as int64 cast to int32 and viewed to [4] before the embedding."""
    i32, i64, f32 = g.DataType.INT32, g.DataType.INT64, g.DataType.FLOAT32
    graph = g.VkGraph(values=[g.Tensor(i64, (1, 4)), g.Tensor(i32, (1, 4)), g.Tensor(i32, (4,)), g.IntList((4,)),
                              g.Tensor(f32, (10, 3), constant_id=0), g.Tensor(f32, (4, 3)), g.Int(-1), g.Bool(False)],
                      chain=[g.OperatorCall(0, "aten._to_copy.default", (0, 1)),
                             g.OperatorCall(1, "aten.view_copy.default", (1, 3, 2)),
                             g.OperatorCall(2, "aten.embedding.default", (4, 2, 6, 7, 7, 5))],
                      input_ids=[0], output_ids=[5])
    assert index_ranges(graph) == [IndexRange(0, 0, 10, "token id", "the vocabulary")]


def test_vkx_run_refuses_an_out_of_range_position_in_one_line(decoder, tmp_path):
    from safetensors.numpy import save_file
    save_file({"input_ids": np.array([[1]], np.int64), "cache_position": np.array([CACHE], np.int64)},
              tmp_path / "in.safetensors")
    line = one_error_line(run_vkx("run", decoder, "--method", "decode", "--inputs", tmp_path / "in.safetensors",
                                  "--repeat", "1"))
    assert f"input 1 (cache_position): position {CACHE} is outside the cache (0..{CACHE - 1})" in line
