#version 450
// Weight-only quantized linear: o[m, n] = sum_k x[m, k] * q[n, k] * s[n, k / GROUP] (+ bias[n]).
// (One row of activations takes matvec_q.comp where its weight rows allow: loader/ops/quant.py.)
// The weight is read as 32-bit words (with VEC four at a time): BITS 4 packs 8 values a word (value j in bits 4j..4j+3,
// stored as q + 8), BITS 8 packs 4 (signed bytes). Each workgroup computes ROWS outputs of one
// row m: its 64 invocations stride over the words of those weight rows (adjacent invocations read
// adjacent words, so the weight streams), then one shared-memory reduction gives the sums.
// Accumulation is fp32; x is any float type (read defines X), s, o and bias any dtype (ANY_IN /
// ANY_OUT: specialization constants 0, 1 and 2; WORDS and DT_* defines).
// Bindings: 0 = x, 1 = weight rows [row0, row0 + rows) as uint words, 2 = scales, 3 = out,
// 4 = bias (HAS_BIAS). A weight larger than one binding is dispatched in row blocks (row0).
// HIGH_FIRST (BITS 4): each byte holds its even value in the high nibble (ExecuTorch's
// linear_qcs4w). Scales are [N, groups]; with SCALE_STRIDE they are [groups, p.scale_stride] (ExecuTorch's
// linear_q4gsw stores them transposed, N padded to a multiple of 4). AFFINE: (scale, offset) pairs,
// w = q * s + o (packed.glslh); a load lies inside one group, so the offset adds o * sum(x) a load.
layout(local_size_x = 64) in;
#include "dtype.glslh"
#include "packed.glslh"

#define ROWS 4
#define WG 64

layout(std430, set = 0, binding = 0) readonly buffer BufX { X_T x[]; };
#ifdef VEC
// 16 bytes of a weight row at a time (words per row a multiple of 4, the scale group a multiple
// of the values in them): a quarter of the weight loads, one scale load per row and load.
layout(std430, set = 0, binding = 1) readonly buffer BufW { uvec4 w[]; };
#define PER_LOAD (PER_WORD * 4)
#else
layout(std430, set = 0, binding = 1) readonly buffer BufW { uint w[]; };
#define PER_LOAD PER_WORD
#endif
ANY_IN(2, S, s, 0)
ANY_OUT(3, O, o, 1)
#ifdef HAS_BIAS
ANY_IN(4, B, bias, 2)
#endif

layout(push_constant) uniform Push {
    uint N;       // output features (all rows)
    uint K;       // input features
    uint words;   // words per weight row (K / PER_WORD)
    uint groups;  // scale groups per row (K / GROUP)
    uint group;   // values per scale group
    uint row0;    // first weight row bound
    uint rows;    // weight rows bound
    uint scale_stride;  // SCALE_STRIDE: the scales' row length
} p;

shared float part[ROWS][WG];

void main() {
    uint t = gl_LocalInvocationID.x;
    uint local0 = gl_WorkGroupID.x * ROWS;     // first row of this workgroup, within the block
    uint m = gl_WorkGroupID.y;
    float acc[ROWS];
    for (uint r = 0u; r < ROWS; ++r) {
        acc[r] = 0.0;
    }
    const uint loads = p.words * PER_WORD / PER_LOAD;  // per weight row
    for (uint wi = t; wi < loads; wi += WG) {
        uint k0 = wi * PER_LOAD;
        float xv[PER_LOAD];
        for (uint j = 0u; j < PER_LOAD; ++j) {
            xv[j] = LOAD_X(m * p.K + k0 + j);
        }
        uint g = k0 / p.group;
#ifdef AFFINE
        float xsum = 0.0;
        for (uint j = 0u; j < PER_LOAD; ++j) {
            xsum += xv[j];
        }
#endif
        for (uint r = 0u; r < ROWS; ++r) {
            uint local = local0 + r;
            if (local < p.rows) {
#ifdef VEC
                uvec4 q = w[local * loads + wi];
                uint words[4] = uint[4](q.x, q.y, q.z, q.w);
#else
                uint words[1] = uint[1](w[local * loads + wi]);
#endif
                float dot = 0.0;
                for (uint i = 0u; i < PER_LOAD / PER_WORD; ++i) {
                    for (uint j = 0u; j < PER_WORD; ++j) {
                        dot += packed_value(words[i], j) * xv[i * PER_WORD + j];
                    }
                }
                const uint at = SCALE_AT(p.row0 + local, g);
                acc[r] += dot * load_S(SCALE_OF(at));
#ifdef AFFINE
                acc[r] += xsum * load_S(OFFSET_OF(at));
#endif
            }
        }
    }
    for (uint r = 0u; r < ROWS; ++r) {
        part[r][t] = acc[r];
    }
    barrier();
    for (uint half_ = WG / 2u; half_ > 0u; half_ >>= 1) {
        if (t < half_) {
            for (uint r = 0u; r < ROWS; ++r) {
                part[r][t] += part[r][t + half_];
            }
        }
        barrier();
    }
    if (t < ROWS && local0 + t < p.rows) {
        uint n = p.row0 + local0 + t;
        float v = part[t][0];
#ifdef HAS_BIAS
        v += load_B(n);
#endif
        store_O(m * p.N + n, v);
    }
}
