"""torchvision's classic image classifiers, written in plain torch (torchvision is not installed: its
wheel is a CUDA build whose ops do not load with the CPU torch): ShuffleNetV2 (channel split, channel
shuffle by view / transpose, depthwise 3x3 stride-2 branches, concat), SqueezeNet 1.0 and 1.1 (fire
modules, ceil-mode max pools, a 1x1 conv classifier and adaptive average pool), DenseNet (dense layers
concatenated, transitions with 2x2 average pools), MobileNetV3-small (hardswish, squeeze-excitation with
hardsigmoid, 5x5 depthwise convs), and torchvision's MobileNetV2, ResNet-18 and EfficientNet-B0 layouts
(transformers' versions of those are in test_hf_vision.py).

The models are tests/data/et_cnn_models.py's, the ones ExecuTorch's own files of them are made from
(tests/regression/test_et_cnns.py), at tiny widths on 32x32 or 64x64 images, with every parameter drawn
again by test_hf_vision's `randomized` so that the logits have real magnitude. Each is exported by vkx in
fp32, fp16 and bf16, run on the device and compared with torch by test_hf_vision's `check` (fp32: 1e-4
of the output's scale; fp16 / bf16: HALF's tolerance against the fp32 model, or three times torch's own
error in that dtype where that is larger).
"""
from __future__ import annotations

import pytest

from tests.data.et_cnn_models import MODELS, build
from .test_hf_vision import DTYPES, check

pytestmark = pytest.mark.vulkan


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", MODELS)
def test_classic_cnn(name, dtype):
    module, x = build(name)
    check(module, x, dtype)
