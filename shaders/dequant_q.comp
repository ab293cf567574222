#version 450
// A packed weight as floats, for products of many rows of activations (loader/ops/quant.py: the
// weight is dequantized into the graph's "dequant" scratch, then multiplied by the 16-bit or fp32
// product kernels, which read each weight byte once a tile instead of once an activation row):
//   o[n, k] = q[n, k] * s[n, k / group]   (packing as in linear_q.comp; AFFINE: + offset[n, k / group])
// One invocation a 32-bit word of the weight: PER_WORD values of one scale group (group % PER_WORD
// == 0). HIGH_FIRST (BITS 4): each byte holds its even value in the high nibble. Scales are
// [N, groups]; with SCALE_STRIDE [groups, p.scale_stride].
// Bindings: 0 = the weight as uint words, 1 = scales, 2 = out [N, K]; scales and out of any dtype
// (ANY_IN / ANY_OUT, specialization constants 0 and 1; WORDS and DT_* defines).
layout(local_size_x = 64) in;
#include "dtype.glslh"
#include "packed.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufW { uint w[]; };
ANY_IN(1, S, s, 0)
ANY_OUT(2, O, o, 1)

layout(push_constant) uniform Push {
    uint words;         // of the whole weight
    uint row_words;     // words a row (K / PER_WORD)
    uint groups;        // scale groups a row
    uint group;
    uint scale_stride;  // SCALE_STRIDE: the scales' row length
} p;

void main() {
    const uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
                     + gl_LocalInvocationID.x;
    if (gid >= p.words) {
        return;
    }
    const uint n = gid / p.row_words;
    const uint k0 = (gid - n * p.row_words) * PER_WORD;
    const uint at = SCALE_AT(n, k0 / p.group);
    const float scale = load_S(SCALE_OF(at));
#ifdef AFFINE
    const float offset = load_S(OFFSET_OF(at));
#else
    const float offset = 0.0;
#endif
    const uint word = w[gid];
    for (uint j = 0u; j < PER_WORD; ++j) {
        store_O(n * p.row_words * PER_WORD + k0 + j, packed_value(word, j) * scale + offset);
    }
}
