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
// SECOND (with INDEXED: an attention's q beside its k): invocations p.n .. p.n + p.n2 rotate a second tensor x2
// [d0, p.d1b, d2, d3] into y2 (not indexed; y2 may be x2's memory), cos and sin read at the same
// strides: two rotations in one dispatch.
// THIRD (with SECOND: the attention's v beside them): invocations p.n + p.n2 .. + p.n3 copy a third
// tensor x3 [d0, p.d1c, d2, d3], not rotated, into its cache y3 [d0, p.d1c, size, d3] at the rows
// idx gives (vkx.index_copy along dim 2).
// Bindings: 0 = x, 1 = cos, 2 = sin, 3 = y, 4 = idx (INDEXED), 5 = x2, 6 = y2 (SECOND), 7 = x3,
// 8 = y3 (THIRD). Defines: elem_defines for X, C, S, Y (and I with INDEXED, X2 and Y2 with SECOND,
// X3 and Y3 with THIRD); INDEXED; SECOND; THIRD.
layout(local_size_x = 64) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufX { X_T x[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufC { C_T cs[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufS { S_T sn[]; };
layout(std430, set = 0, binding = 3) writeonly buffer BufY { Y_T y[]; };
#ifdef INDEXED
layout(std430, set = 0, binding = 4) readonly buffer BufI { I_T idx[]; };
#endif
#ifdef SECOND
layout(std430, set = 0, binding = 5) readonly buffer BufX2 { X2_T x2[]; };
layout(std430, set = 0, binding = 6) writeonly buffer BufY2 { Y2_T y2[]; };
#endif
#ifdef THIRD
layout(std430, set = 0, binding = 7) readonly buffer BufX3 { X3_T x3[]; };
layout(std430, set = 0, binding = 8) writeonly buffer BufY3 { Y3_T y3[]; };
#endif

layout(push_constant) uniform Push {
    uint n, d1, d2, d3;
    uint c0, c1, c2, c3;
    uint s0, s1, s2, s3;
    uint size;  // INDEXED: the cache's rows
    uint n2, d1b;  // SECOND: its pairs and its dim 1
    uint n3, d1c;  // THIRD: its pairs and its dim 1
} p;

void main() {
    uint pair = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
    uint n = p.n, d1 = p.d1;
    int part = 0;  // 0: x rotated into y, 1: x2 into y2, 2: x3 copied into y3
#ifdef SECOND
    if (pair >= n) {
        pair -= n;
        part = 1;
        n = p.n2;
        d1 = p.d1b;
    }
#endif
#ifdef THIRD
    if (pair >= n && part == 1) {
        pair -= n;
        part = 2;
        n = p.n3;
        d1 = p.d1c;
    }
#endif
    if (pair >= n) {
        return;
    }
    const uint h = p.d3 / 2u;
    const uint i3 = pair % h;
    uint rest = pair / h;
    const uint i2 = rest % p.d2;
    rest /= p.d2;
    const uint i1 = rest % d1;
    const uint i0 = rest / d1;
    const uint lo = (pair / h) * p.d3 + i3;
    const uint c = i0 * p.c0 + i1 * p.c1 + i2 * p.c2 + i3 * p.c3;
    const uint s = i0 * p.s0 + i1 * p.s1 + i2 * p.s2 + i3 * p.s3;
    float a, b;
#ifdef THIRD
    if (part == 2) {
        a = LOAD_X3(lo);
        b = LOAD_X3(lo + h);
    } else
#endif
#ifdef SECOND
    if (part == 1) {
        a = LOAD_X2(lo);
        b = LOAD_X2(lo + h);
    } else
#endif
    {
        a = LOAD_X(lo);
        b = LOAD_X(lo + h);
    }
    float ya = a * LOAD_C(c) - b * LOAD_S(s), yb = b * LOAD_C(c + h * p.c3) + a * LOAD_S(s + h * p.s3);
#ifdef THIRD
    if (part == 2) {
        ya = a;
        yb = b;
    }
#endif
#ifdef SECOND
    if (part == 1) {
        STORE_Y2(lo, ya);
        STORE_Y2(lo + h, yb);
        return;
    }
#endif
#ifdef INDEXED
    const int position = LOADI_I(i2);
    if (position < 0 || position >= int(p.size)) {
        return;
    }
    const uint to = ((i0 * d1 + i1) * p.size + uint(position)) * p.d3 + i3;
#else
    const uint to = lo;
#endif
#ifdef THIRD
    if (part == 2) {
        STORE_Y3(to, ya);
        STORE_Y3(to + h, yb);
        return;
    }
#endif
    STORE_Y(to, ya);
    STORE_Y(to + h, yb);
}
