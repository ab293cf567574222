"""What a call gives back: correct after many calls, arrays of its own, any input layout (loader/execute/ports.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from vkx.loader import load_graph
from vkx.loader.errors import InputError, LoadError
from vkx.loader.lm.greedy import Argmax

from .helpers import relu_add_graph, weights

N = 1000


@pytest.fixture(scope="module")
def program():
    w = weights(N)
    with load_graph(relu_add_graph(N), [w]) as p:
        yield p, w


def expect(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.maximum(np.asarray(x, np.float32), 0) + w


def test_many_calls_stay_correct_and_keep_their_outputs(program):
    p, w = program
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(N).astype(np.float32) * 3 for _ in range(300)]
    outs = [p(x) for x in xs]
    # each earlier output still holds its own call's result: no call wrote into another's array
    for x, out in zip(xs, outs):
        np.testing.assert_allclose(out, expect(x, w), rtol=1e-6)
    assert len({out.ctypes.data for out in outs}) == len(outs)


def test_an_output_is_the_callers_to_write(program):
    p, w = program
    x = np.linspace(-2, 2, N, dtype=np.float32)
    first = p(x)
    first[:] = 7.0
    np.testing.assert_allclose(p(x), expect(x, w), rtol=1e-6)


def test_torch_outputs_are_their_own_tensors(program):
    p, w = program
    a = p(torch.full((N,), 1.0))
    b = p(torch.full((N,), 2.0))
    np.testing.assert_allclose(a.numpy(), expect(np.full(N, 1.0), w), rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), expect(np.full(N, 2.0), w), rtol=1e-6)


def test_strided_and_grad_inputs_are_read_as_values(program):
    p, w = program
    big = np.random.default_rng(2).standard_normal(2 * N).astype(np.float32)
    np.testing.assert_allclose(p(big[::2]), expect(big[::2], w), rtol=1e-6)
    t = torch.from_numpy(big).requires_grad_()
    np.testing.assert_allclose(p(t[1::2]).numpy(), expect(big[1::2], w), rtol=1e-6)


def test_bad_inputs_are_refused_before_any_write(program):
    p, w = program
    x = np.ones(N, np.float32)
    good = p(x)
    with pytest.raises(InputError, match=r"input 0: dtype float64, expected float32"):
        p(np.ones(N))
    with pytest.raises(InputError, match=r"input 0: shape \(3,\), expected \(1000,\)"):
        p(np.ones(3, np.float32))
    with pytest.raises(InputError, match="expected 1 input"):
        p(x, x)
    np.testing.assert_allclose(p.run_numpy(x)[0], good, rtol=0)


@pytest.mark.parametrize("spin_seconds", [0.002, 0.0], ids=["done-while-polling", "polling-gives-up"])
def test_a_gpu_polls_its_fence_then_blocks(program, monkeypatch, spin_seconds):
    """On a GPU a call polls its fence (loader/execute/record.py, SPIN_SECONDS) and blocks once the spin is
    spent; lavapipe never polls, so the GPU's path is forced here and counted."""
    from vkx.loader.execute import record
    from vkx.loader.gpu.device import Device

    p, w = program
    polls = []
    status = record.lib.vkGetFenceStatus
    monkeypatch.setattr(Device, "is_cpu", property(lambda self: False))
    monkeypatch.setattr(record, "SPIN_SECONDS", spin_seconds)
    monkeypatch.setattr(record, "lib", _Counting(record.lib, "vkGetFenceStatus", lambda *a: polls.append(1) or status(*a)))
    rng = np.random.default_rng(3)
    for _ in range(20):
        x = rng.standard_normal(N).astype(np.float32)
        np.testing.assert_allclose(p(x), expect(x, w), rtol=1e-6)
    assert len(polls) >= 20  # every call polled at least once


class _Counting:
    """`lib` with one function replaced (cffi's lib object takes no attribute assignment)."""

    def __init__(self, lib, name: str, fn):
        self._lib, self._name, self._fn = lib, name, fn

    def __getattr__(self, name: str):
        return self._fn if name == self._name else getattr(self._lib, name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_argmax_reads_back_the_indices_only(tmp_path, dtype):
    """lm.greedy.Argmax: the output's argmax over its last dim computed on the device after the call
    (a greedy decode step's token ids), the same as the argmax of the output a plain call returns;
    plain calls before and after are unchanged."""
    import vkx

    torch.manual_seed(0)
    module = torch.nn.Linear(64, 3000).to(dtype)
    path = tmp_path / "m.pte"
    x = torch.randn(1, 5, 64).to(dtype)
    vkx.export_model(module, (x,), path)
    with vkx.load(path) as p:
        for seed in range(3):
            x = torch.randn(1, 5, 64, generator=torch.Generator().manual_seed(seed)).to(dtype)
            logits = p(x)
            got = Argmax(p.only)(x)
            assert got.dtype == np.int32 and got.shape == (1, 5)
            np.testing.assert_array_equal(got, logits.float().argmax(-1).numpy())
            torch.testing.assert_close(p(x), logits, rtol=0, atol=0)


def test_argmax_needs_one_float_output():
    w = weights(N)
    graph = relu_add_graph(N)
    graph.output_ids.append(2)
    with load_graph(graph, [w]) as p:
        with pytest.raises(LoadError, match="one output"):
            Argmax(p.only)


def test_a_program_nobody_holds_keeps_its_load_while_a_call_runs():
    """`load_graph(...).run_numpy(x)`: the program goes while its method runs, and its load stays until
    the method goes too (before, the program's finalizer released the load: "program is closed")."""
    import gc
    import weakref

    graph, w = relu_add_graph(N), weights(N)
    x = np.linspace(-2, 2, N, dtype=np.float32)
    np.testing.assert_array_equal(load_graph(graph, [w]).run_numpy(x)[0], expect(x, w))
    method = load_graph(graph, [w]).forward
    gc.collect()
    np.testing.assert_array_equal(method(x), expect(x, w))
    ledger, load = method.load.ledger, weakref.ref(method.load)
    assert sum(ledger.live.values()) > 0
    del method
    gc.collect()
    assert load() is None and sum(ledger.live.values()) == 0  # released with the last reference
