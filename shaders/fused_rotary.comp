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
// 8 = y3 (THIRD), each of any dtype (ANY_IN / ANY_OUT in dtype.glslh; specialization constants
// X_DT, C_DT, S_DT, Y_DT = 0-3, I_DT = 4 with INDEXED, X2_DT, Y2_DT = 5, 6 with SECOND, X3_DT, Y3_DT
// = 7, 8 with THIRD). Defines: INDEXED; SECOND (with INDEXED); THIRD (with SECOND).
layout(local_size_x = 64) in;
#include "dtype.glslh"

ANY_IN(0, X, x, 0)
ANY_IN(1, C, cs, 1)
ANY_IN(2, S, sn, 2)
ANY_OUT(3, Y, y, 3)
#ifdef INDEXED
ANY_IN(4, I, idx, 4)
#endif
#ifdef SECOND
ANY_IN(5, X2, x2, 5)
ANY_OUT(6, Y2, y2, 6)
#endif
#ifdef THIRD
ANY_IN(7, X3, x3, 7)
ANY_OUT(8, Y3, y3, 8)
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
        a = load_X3(lo);
        b = load_X3(lo + h);
    } else
#endif
#ifdef SECOND
    if (part == 1) {
        a = load_X2(lo);
        b = load_X2(lo + h);
    } else
#endif
    {
        a = load_X(lo);
        b = load_X(lo + h);
    }
    float ya = a * load_C(c) - b * load_S(s), yb = b * load_C(c + h * p.c3) + a * load_S(s + h * p.s3);
#ifdef THIRD
    if (part == 2) {
        ya = a;
        yb = b;
    }
#endif
#ifdef SECOND
    if (part == 1) {
        store_Y2(lo, ya);
        store_Y2(lo + h, yb);
        return;
    }
#endif
#ifdef INDEXED
    const int position = loadi_I(i2);
    if (position < 0 || position >= int(p.size)) {
        return;
    }
    const uint to = ((i0 * d1 + i1) * p.size + uint(position)) * p.d3 + i3;
#else
    const uint to = lo;
#endif
#ifdef THIRD
    if (part == 2) {
        store_Y3(to, ya);
        store_Y3(to + h, yb);
        return;
    }
#endif
    store_Y(to, ya);
    store_Y(to + h, yb);
}
