#version 450
// Rotary embedding as transformers writes it (rotate_half), one invocation per pair (i, i + h):
//   y = x * cos + rotate_half(x) * sin,  rotate_half(x)[i] = -x[i + h] for i < h, x[i - h] after,
// over the last dim of D = 2h elements; cos and sin broadcast to x's shape. An invocation reads
// both elements of its pair before it writes them, so y may be x's own memory (a plan may give it).
// x's shape is four dims (d0..d3, d3 = D); element (i0, i1, i2, i3) of cos is
// cos[i0*c0 + i1*c1 + i2*c2 + i3*c3], of sin likewise with s0..s3. p.n counts pairs.
// fp32 math, one rounding on the store.
// INDEXED (the KV-cache write fused in, vkx.index_copy along dim 2): y is the cache [d0, d1, size,
// d3] and x's row i2 goes to its row idx[i2] (a position outside [0, size) writes nothing).
// Bindings: 0 = x, 1 = cos, 2 = sin, 3 = y, 4 = idx (INDEXED). Defines: elem_defines for X, C, S,
// Y (and I with INDEXED); INDEXED.
layout(local_size_x = 64) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufX { X_T x[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufC { C_T cs[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufS { S_T sn[]; };
layout(std430, set = 0, binding = 3) writeonly buffer BufY { Y_T y[]; };
#ifdef INDEXED
layout(std430, set = 0, binding = 4) readonly buffer BufI { I_T idx[]; };
#endif

layout(push_constant) uniform Push {
    uint n, d1, d2, d3;
    uint c0, c1, c2, c3;
    uint s0, s1, s2, s3;
    uint size;  // INDEXED: the cache's rows
} p;

void main() {
    const uint pair = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
    if (pair >= p.n) {
        return;
    }
    const uint h = p.d3 / 2u;
    const uint i3 = pair % h;
    uint rest = pair / h;
    const uint i2 = rest % p.d2;
    rest /= p.d2;
    const uint i1 = rest % p.d1;
    const uint i0 = rest / p.d1;
    const uint lo = (pair / h) * p.d3 + i3;
    const uint c = i0 * p.c0 + i1 * p.c1 + i2 * p.c2 + i3 * p.c3;
    const uint s = i0 * p.s0 + i1 * p.s1 + i2 * p.s2 + i3 * p.s3;
    const float a = LOAD_X(lo), b = LOAD_X(lo + h);
#ifdef INDEXED
    const int position = LOADI_I(i2);
    if (position < 0 || position >= int(p.size)) {
        return;
    }
    const uint to = ((i0 * p.d1 + i1) * p.size + uint(position)) * p.d3 + i3;
#else
    const uint to = lo;
#endif
    STORE_Y(to, a * LOAD_C(c) - b * LOAD_S(s));
    STORE_Y(to + h, b * LOAD_C(c + h * p.c3) + a * LOAD_S(s + h * p.s3));
}
