"""Make et_phi3.pte in this folder (run by hand, not in CI): python tests/data/make_et_phi3_file.py

Needs executorch==1.5.1 and transformers. A tiny transformers Phi-3 (4 query heads over 2 key/value heads
of 32, one layer, seeded random weights) exported whole (no cache) through ExecuTorch's own
VulkanPartitioner, which matches its rotary embedding on the heads-first layout transformers uses:
et_vk.apply_rotary_emb_hf with xq [1, 4, 16, 32], xk [1, 2, 16, 32] and tables [1, 16, 32].
et_phi3.npz holds the input ids and torch's logits.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import transformers
from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
from executorch.exir import to_edge_transform_and_lower

HERE = Path(__file__).resolve().parent


class Logits(torch.nn.Module):
    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False).logits


def main() -> None:
    torch.manual_seed(0)
    config = transformers.Phi3Config(vocab_size=64, hidden_size=128, intermediate_size=64, num_hidden_layers=1,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                     pad_token_id=0, attn_implementation="sdpa")
    model = Logits(transformers.Phi3ForCausalLM(config).eval())
    ids = torch.randint(0, config.vocab_size, (1, 16))
    with torch.no_grad():
        logits = model(ids)
    program = torch.export.export(model, (ids,))
    et = to_edge_transform_and_lower(program, partitioner=[VulkanPartitioner()]).to_executorch()
    (HERE / "et_phi3.pte").write_bytes(et.buffer)
    np.savez(HERE / "et_phi3.npz", input_ids=ids.numpy(), logits=logits.numpy())


if __name__ == "__main__":
    main()
