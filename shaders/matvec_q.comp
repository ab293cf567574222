#version 450
// Weight-only quantized matrix-vector product, one row of activations (the decode case):
//   o[n] = sum_k x[k] * q[n, k] * s[n, k / group] (+ bias[n])
// The weight rows are read 16 bytes (a uvec4) at a time: VALS values, 32 at BITS 4 (value j of a
// word in bits 4j..4j+3, stored as q + 8; HIGH_FIRST: each byte's even value in its high nibble),
// 16 at BITS 8 (signed bytes). A uvec4 lies inside one scale group (group % VALS == 0).
// Workgroup w owns ROWS rows; its WG invocations split K: invocation i reads chunks i, i + WG, ...
// of every row (neighbours read neighbouring 16 bytes), the ROWS chunks' loads issued together,
// and the chunk's VALS activations once, as vec4s, for all ROWS rows. Per chunk and row:
//   sum_j s * q_j * x_j = s * (sum_j u_j * x_j - ZERO * sum_j x_j)
// with u = q + ZERO the stored unsigned field (int8's bytes flipped to q + 128), so the zero point
// costs one multiply-add per chunk and the scale one multiply. fp32 accumulation, then one
// shared-memory reduction over the WG partial sums of each row.
// Bindings: 0 = x, 1 = weight rows [row0, row0 + rows) as uvec4, 2 = scales, 3 = out,
// 4 = bias (HAS_BIAS). Defines: elem_defines for X, S, O, B; X_V and LOAD4_X(i) (elements
// i..i+3 of x as a vec4, i a multiple of 4); BITS, ROWS, WG (a multiple of ROWS), HIGH_FIRST,
// SCALE_STRIDE (scales [groups, SCALE_STRIDE], else [N, groups]), HAS_BIAS.
layout(local_size_x = WG) in;
#include "dtype.glslh"
#include "pairs.glslh"

#if BITS == 4
#define VALS 32
#define ZERO 8.0
#else
#define VALS 16
#define ZERO 128.0
#endif
#ifdef SCALE_STRIDE
#define SCALE_AT(n, g) ((g) * SCALE_STRIDE + (n))
#else
#define SCALE_AT(n, g) ((n) * p.groups + (g))
#endif
#ifdef HIGH_FIRST
#define XI(j) ((j) ^ 1u)
#else
#define XI(j) (j)
#endif

layout(std430, set = 0, binding = 0) readonly buffer BufX { X_V x[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufW { uvec4 w[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufS { S_T s[]; };
layout(std430, set = 0, binding = 3) writeonly buffer BufO { O_T o[]; };
#ifdef HAS_BIAS
layout(std430, set = 0, binding = 4) readonly buffer BufB { B_T bias[]; };
#endif

layout(push_constant) uniform Push {
    uint chunks;     // 16-byte chunks per weight row (K / VALS)
    uint groups;     // scale groups per row
    uint per_group;  // chunks per scale group
    uint row0;       // first weight row bound
    uint rows;       // weight rows bound
} p;

// The bits `mask` of `word` (a field u at bit e, e + 4 <= 20) as the float u * 2^e: OR-ed into the
// mantissa of 2^23, minus 2^23, is exact, and costs one logic op and an add where float(uint)
// takes a conversion, a quarter-rate instruction on many GPUs.
float field(uint word, uint mask) {
    return uintBitsToFloat((word & mask) | 0x4B000000u) - 8388608.0;
}

// sum_j u_j * x[j] over the VALS stored fields of q. Fields are taken in place (the position's power
// of two folded in once at the end), the upper ones from the word shifted down to bits < 20.
float dot_fields(uvec4 q, float xv[VALS]) {
#if BITS == 4
    float d0 = 0.0, d1 = 0.0, d2 = 0.0, d3 = 0.0, d4 = 0.0;
    for (uint i = 0u; i < 4u; ++i) {
        const uint v = q[i], hi = v >> 12;  // hi: values 5, 6, 7 in bits 8..19
        const uint b = 8u * i;
        d0 += field(v, 0xFu) * xv[b + XI(0u)];
        d1 += field(v, 0xF0u) * xv[b + XI(1u)];
        d2 += field(v, 0xF00u) * xv[b + XI(2u)] + field(hi, 0xF00u) * xv[b + XI(5u)];
        d3 += field(v, 0xF000u) * xv[b + XI(3u)] + field(hi, 0xF000u) * xv[b + XI(6u)];
        d4 += field(v, 0xF0000u) * xv[b + XI(4u)] + field(hi, 0xF0000u) * xv[b + XI(7u)];
    }
    return d0 + (d1 + (d2 + (d3 + d4 * 0.0625) * 0.0625) * 0.0625) * 0.0625;
#else
    float d0 = 0.0, d1 = 0.0;
    for (uint i = 0u; i < 4u; ++i) {
        const uint v = q[i] ^ 0x80808080u, hi = v >> 16;  // each byte q + 128; hi: bytes 2, 3
        const uint b = 4u * i;
        d0 += field(v, 0xFFu) * xv[b] + field(hi, 0xFFu) * xv[b + 2u];
        d1 += field(v, 0xFF00u) * xv[b + 1u] + field(hi, 0xFF00u) * xv[b + 3u];
    }
    return d0 + d1 * 0.00390625;
#endif
}

// Partial sums: part[r][i] is invocation i's sum for row first + r (padded against bank conflicts).
shared float part[ROWS][WG + 1];
#define SEGS (WG / ROWS)
shared float seg[ROWS][SEGS];

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint first = gl_WorkGroupID.x * ROWS;  // first row of this workgroup, within the block
    uint row[ROWS];  // rows past the block repeat the last one (read, never stored)
    float acc[ROWS];
    for (uint r = 0u; r < ROWS; ++r) {
        row[r] = min(first + r, p.rows - 1u);
        acc[r] = 0.0;
    }
    for (uint c = lid; c < p.chunks; c += WG) {
        uvec4 q[ROWS];
        for (uint r = 0u; r < ROWS; ++r) {
            q[r] = w[row[r] * p.chunks + c];
        }
        float xv[VALS];
        float xsum = 0.0;
        for (uint j = 0u; j < VALS; j += 4u) {
            const vec4 v = LOAD4_X(c * VALS + j);
            xv[j] = v.x;
            xv[j + 1u] = v.y;
            xv[j + 2u] = v.z;
            xv[j + 3u] = v.w;
            xsum += (v.x + v.y) + (v.z + v.w);
        }
        const uint g = c / p.per_group;
        for (uint r = 0u; r < ROWS; ++r) {
            acc[r] += LOAD_S(SCALE_AT(p.row0 + row[r], g)) * (dot_fields(q[r], xv) - ZERO * xsum);
        }
    }

    // Reduce in two steps, every invocation busy in the first: invocation i adds ROWS partials of
    // row i % ROWS, then ROWS invocations add SEGS sums each.
    for (uint r = 0u; r < ROWS; ++r) {
        part[r][lid] = acc[r];
    }
    barrier();
    {
        const uint r = lid % ROWS, j = lid / ROWS;
        float sum = 0.0;
        for (uint i = 0u; i < ROWS; ++i) {
            sum += part[r][j * ROWS + i];
        }
        seg[r][j] = sum;
    }
    barrier();
    if (lid < ROWS && first + lid < p.rows) {
        float sum = 0.0;
        for (uint j = 0u; j < SEGS; ++j) {
            sum += seg[lid][j];
        }
        const uint n = p.row0 + first + lid;
#ifdef HAS_BIAS
        sum += LOAD_B(n);
#endif
        STORE_O(n, sum);
    }
}
