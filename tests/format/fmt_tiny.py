"""A tiny deterministic program (Linear + relu + add of a shared constant) for golden/mutation tests.

`python tests/format/fmt_tiny.py` regenerates the golden files in tests/data/golden/
(the golden test compares exact bytes; regenerate only after a deliberate format change).
"""
from __future__ import annotations

import hashlib
import struct
import sys
from pathlib import Path

from vkx.format import ConstantPayload, IOSpec, MethodSpec, ScalarType, write_methods, write_program
from vkx.format import vkgraph as vk
from vkx.format.metadata import ProgramMetadata

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
F32 = vk.DataType.FLOAT32


def floats(*xs: float) -> bytes:
    return struct.pack(f"<{len(xs)}f", *xs)


def tiny_constants() -> list[bytes]:
    weight = floats(*[(i % 7) - 3.0 for i in range(12)])   # [3, 4]
    bias = floats(0.5, -0.5, 1.0)                            # [3]
    return [weight, bias, bias]                              # constant 2 shares bytes (and key) with 1


def tiny_graph() -> vk.VkGraph:
    act = dict(storage_type=vk.StorageType.TEXTURE_3D, memory_layout=vk.MemoryLayout.TENSOR_WIDTH_PACKED, staging_datatype=F32)
    return vk.VkGraph(
        values=[
            vk.Tensor(F32, (3, 4), constant_id=0, staging_datatype=F32),      # 0 weight
            vk.Tensor(F32, (3,), constant_id=1, staging_datatype=F32),        # 1 bias
            vk.Tensor(F32, (3,), constant_id=2, staging_datatype=F32),        # 2 shift
            vk.Tensor(F32, (1, 4), mem_obj_id=0, **act),                      # 3 x
            vk.Tensor(F32, (1, 3), mem_obj_id=1, **act),                      # 4 linear out
            vk.Tensor(F32, (1, 3), mem_obj_id=0, **act),                      # 5 relu out
            vk.Tensor(F32, (3,), storage_type=vk.StorageType.TEXTURE_3D,
                      memory_layout=vk.MemoryLayout.TENSOR_WIDTH_PACKED),             # 6 packed shift
            vk.Int(1),                                                         # 7 alpha
            vk.Tensor(F32, (1, 3), mem_obj_id=1, **act),                      # 8 y
        ],
        chain=[
            vk.OperatorCall(0, "et_vk.prepack.default", (2, 6)),
            vk.OperatorCall(1, "aten.linear.default", (3, 0, 1, 4)),
            vk.OperatorCall(2, "aten.relu.default", (4, 5)),
            vk.OperatorCall(3, "aten.add.Tensor", (5, 6, 7, 8)),
        ],
        input_ids=[3],
        output_ids=[8],
    )


def tiny_payloads(calls: list[str] | None = None) -> list[ConstantPayload]:
    out = []
    for data in tiny_constants():
        key = hashlib.sha256(data).hexdigest()

        def read(data=data, key=key):
            if calls is not None:
                calls.append(key)
            return data
        out.append(ConstantPayload(key, len(data), read))
    return out


def write_tiny(path: Path | str, **kwargs):
    return write_program(path, tiny_graph(), tiny_payloads(), [IOSpec(ScalarType.FLOAT, (1, 4))],
                         [IOSpec(ScalarType.FLOAT, (1, 3))], pytree_in="in", pytree_out="out", **kwargs)


def write_tiny_ref(path: Path | str, checkpoint: Path | str):
    """The tiny program referencing its constants in `checkpoint` (tiny_st.safetensors holds them under
    the same keys), recording EOS id 2."""
    payloads = [ConstantPayload(p.key, p.nbytes, None, stored_in=str(checkpoint)) for p in tiny_payloads()]
    method = MethodSpec("forward", tiny_graph(), payloads, [IOSpec(ScalarType.FLOAT, (1, 4))],
                        [IOSpec(ScalarType.FLOAT, (1, 3))], "in", "out")
    return write_methods(path, [method], metadata=ProgramMetadata(eos_token_ids=(2,)))


GOLDENS = {
    "tiny_named.pte": {},
    "tiny_legacy.pte": {"layout": "legacy"},
}


def main() -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name, kwargs in GOLDENS.items():
        write_tiny(GOLDEN / name, **kwargs)
    write_tiny(GOLDEN / "tiny_ext.pte", external_data=GOLDEN / "tiny_ext.ptd")
    write_tiny(GOLDEN / "tiny_st.pte", external_data=GOLDEN / "tiny_st.safetensors")
    write_tiny_ref(GOLDEN / "tiny_ref.pte", GOLDEN / "tiny_st.safetensors")
    print("wrote", *sorted(p.name for p in GOLDEN.iterdir()), file=sys.stderr)


if __name__ == "__main__":
    main()
