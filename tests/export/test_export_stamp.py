"""A model folder's layers traced once per kind and stamped (vkx.export.stamp) give the very file
the full trace gives, byte for byte, for every family vkx exports; and the stamping happened
(torch.export traced two layers, not four)."""
from __future__ import annotations

import pytest
import torch

import vkx.export.stamp as stamp
from tests.llm.families import FAMILIES, config, write_folder
from vkx.export import hf
from vkx.export.api import export_model
from vkx.format.metadata import ProgramMetadata

LAYERS, MAX_SEQ, PREFILL = 4, 32, 8


def both_exports(tmp_path, monkeypatch, cfg, **options) -> tuple[bytes, bytes, list[int]]:
    """The stamped export's bytes, the full trace's, and the depth of each model torch.export traced
    while stamping (export_folder's methods and metadata, on one module)."""
    folder = tmp_path / "model"
    write_folder(folder, cfg.model_type, cfg=cfg)
    lm = hf.causal_lm(hf.read_folder(folder), MAX_SEQ, options.pop("dtype", "keep"))
    methods = {"prefill": (torch.zeros(1, PREFILL, dtype=torch.long), torch.arange(PREFILL)),
               "decode": (torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, dtype=torch.long))}
    metadata = ProgramMetadata(eos_token_ids=hf.eos_token_ids(hf.read_folder(folder), lm.config))
    depths = []
    traced, repeated = stamp.trace, lm.repeated()

    def counting(module, inputs):
        depths.append(len(module.get_submodule(repeated.layers)))
        return traced(module, inputs)
    monkeypatch.setattr(stamp, "trace", counting)
    export_model(lm, methods, tmp_path / "stamped.pte", metadata=metadata, repeated=repeated, **options)
    monkeypatch.undo()
    export_model(lm, methods, tmp_path / "full.pte", metadata=metadata, **options)
    return (tmp_path / "stamped.pte").read_bytes(), (tmp_path / "full.pte").read_bytes(), depths


def deep(family: str, **overrides):
    if family == "gpt2":  # its config takes no overrides
        cfg = config(family)
        cfg.n_layer = LAYERS
        return cfg
    return config(family, num_hidden_layers=LAYERS, **overrides)


@pytest.mark.parametrize("family", FAMILIES)
def test_stamped_layers_give_the_full_trace_bytes(tmp_path, monkeypatch, family):
    stamped, full, depths = both_exports(tmp_path, monkeypatch, deep(family))
    assert depths == [2, 2]  # prefill and decode each traced two of the four layers
    assert stamped == full


@pytest.mark.parametrize("options", [{"quantize": "int4"}, {"dtype": "bf16"}], ids=["int4", "bf16"])
def test_stamped_quantized_and_widened_layers_give_the_full_trace_bytes(tmp_path, monkeypatch, options):
    """The layers' quantized linears (packed weights and scales), and bf16 matrices read widened, are stamped too."""
    stamped, full, depths = both_exports(tmp_path, monkeypatch, deep("llama"), **options)
    assert depths == [2, 2]
    assert stamped == full


def test_each_kind_of_layer_is_traced(tmp_path, monkeypatch):
    """Qwen2 with sliding-window layers after two full-attention ones: the template holds a layer of
    each kind (three layers), the fourth is stamped from the third."""
    cfg = deep("qwen2", use_sliding_window=True, sliding_window=16, max_window_layers=2)
    assert cfg.layer_types == ["full_attention"] * 2 + ["sliding_attention"] * 2
    stamped, full, depths = both_exports(tmp_path, monkeypatch, cfg)
    assert depths == [3, 3]
    assert stamped == full


def test_template_length():
    """At least two layers; a stamped layer's template is a later one than the first (it has a layer before it)."""
    a, b = ("a",), ("b",)
    assert stamp.template_length([a, a, a, a]) == 2
    assert stamp.template_length([a, a]) == 2
    assert stamp.template_length([a, b, b, b]) == 2
    assert stamp.template_length([a, b, a, b]) == 3  # the "a" of layer 2 is the only one after layer 0
    assert stamp.template_length([a, a, b, b]) == 3
