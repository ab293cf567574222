"""ExecuTorch 1.5.1's own Vulkan files (tests/data) run on the vkx loader and match torch.

The sample files were made by tests/data/make_et_files.py from the models in
tests/data/et_models.py, built after torch.manual_seed(0); the same models are
rebuilt here as the oracle.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import vkx
from .oracle import oracle

from tests.data.et_models import CNN, MLP

DATA = Path(__file__).resolve().parents[1] / "data"

CASES = {  # file -> (model class, input shape, external data)
    "et_mlp.pte": (MLP, (1, 8), None),
    "et_mlp_ext.pte": (MLP, (1, 8), "et_mlp_ext.ptd"),
    "et_cnn.pte": (CNN, (1, 3, 8, 8), None),  # conv + relu fused as et_vk.conv_with_clamp
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("schedule", ["lazy", "eager"])
def test_executorch_file_matches_torch(name, schedule):
    model_class, shape, external = CASES[name]
    x, expected = oracle(model_class, shape)
    externals = [DATA / external] if external else []
    with vkx.load(DATA / name, external_data=externals, schedule=schedule) as program:
        got = program(x)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_external_data_is_required_when_the_pte_has_none(tmp_path):
    (tmp_path / "alone.pte").write_bytes((DATA / "et_mlp_ext.pte").read_bytes())  # no same-stem .ptd beside it
    with pytest.raises(vkx.FormatError, match="its constants are in external data"):
        vkx.load(tmp_path / "alone.pte")
