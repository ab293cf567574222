"""The torch oracle of tests/data's ExecuTorch files: their models rebuilt as the make_* scripts built them."""
from __future__ import annotations

import torch


def oracle(model_class, shape) -> tuple[torch.Tensor, torch.Tensor]:
    """(input, torch's output) of `model_class` built after torch.manual_seed(0), on torch.randn(shape)
    drawn next: the models and inputs the files in tests/data were made from."""
    torch.manual_seed(0)
    model = model_class().eval()
    x = torch.randn(shape)
    with torch.no_grad():
        return x, model(x)
