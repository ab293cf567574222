#version 450
// Quantized embedding gather: out[i, k] = q[idx[i], k] * s[idx[i], k / group] (packing as in
// linear_q.comp; AFFINE: + the group's offset, packed.glslh). An index outside the table gives a row
// of zeros (never a read outside it).
// HIGH_FIRST: each byte holds its even value in the high nibble (ExecuTorch's embedding_q4gsw
// with is_linear_weight false). `words` is the row stride, which may exceed K / PER_WORD
// (ExecuTorch pads rows to whole words).
// Bindings: 0 = weight rows [row0, row0 + rows) as uint words, 1 = scales, 2 = indices,
// 3 = out; scales, indices and out of any dtype (ANY_IN / ANY_OUT, specialization constants 0..2;
// WORDS and DT_* defines). Each dispatch writes only the outputs whose index falls in its row block.
// One invocation per output element.
layout(local_size_x = 64) in;
#include "dtype.glslh"
#include "packed.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufW { uint w[]; };
ANY_IN(1, S, s, 0)
ANY_IN(2, I, idx, 1)
ANY_OUT(3, O, o, 2)

layout(push_constant) uniform Push {
    uint n;       // outputs: indices * K
    uint K;
    uint words;   // words per row (the row stride)
    uint groups;  // scale groups per row
    uint group;
    uint row0;
    uint rows;
    uint vocab;   // rows of the whole table
    uint last;    // 1 for the dispatch of the last row block: it writes the zeros
} p;

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.n) {
        return;
    }
    uint i = gid / p.K;
    uint k = gid - i * p.K;
    int row = loadi_I(i);
    if (row < 0 || uint(row) >= p.vocab) {
        if (p.last == 1u) {
            store_O(gid, 0.0);
        }
        return;
    }
    if (uint(row) < p.row0 || uint(row) >= p.row0 + p.rows) {
        return;
    }
    uint word = w[(uint(row) - p.row0) * p.words + k / PER_WORD];
    float q = packed_value(word, k % PER_WORD);
    const uint at = uint(row) * p.groups + k / p.group;
#ifdef AFFINE
    store_O(gid, q * load_S(SCALE_OF(at)) + load_S(OFFSET_OF(at)));
#else
    store_O(gid, q * load_S(at));
#endif
}
