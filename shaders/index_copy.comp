#version 450
// In-place cache update: t[o, index[j], k] = s[o, j, k] over the dims of t collapsed to
// [outer, size, inner] around the written dim (vkx.index_copy.default).
// Bindings: 0 = t (the state, written), 1 = index (int32 [n]), 2 = s [outer, n, inner], each of any
// dtype (ANY_OUT / ANY_IN in dtype.glslh; specialization constants T_DT, I_DT, S_DT = 0-2).
// t and s of one dtype: a bit copy of its element size; else (a 16- or 8-bit constant s read by
// words into a state held in 32 bits) converted as s's type is read: through float or through int.
// The positions are data: the command buffer is recorded once and each call writes where
// that call's index says. A position outside [0, size) writes nothing (torch raises).
// One invocation per source element.
layout(local_size_x = 64) in;
#include "dtype.glslh"

ANY_OUT(0, T, t, 0)
ANY_IN(1, I, idx, 1)
ANY_IN(2, S, s, 2)

layout(push_constant) uniform Push {
    uint count;   // outer * n * inner
    uint n;       // positions written
    uint inner;   // elements after the written dim
    int size;     // size of the written dim in t
} p;

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.count) {
        return;
    }
    uint row = gid / p.inner;
    uint k = gid - row * p.inner;
    uint o = row / p.n;
    uint j = row - o * p.n;
    int position = loadi_I(j);
    if (position < 0 || position >= p.size) {
        return;
    }
    uint to = (o * uint(p.size) + uint(position)) * p.inner + k;
    if (T_DT == S_DT) {
#ifndef WORDS  // without narrow storage, t (written) has 32-bit elements
        if (T_DT == DT_FLOAT16 || T_DT == DT_BFLOAT16) {
            t_u16[to] = s_u16[gid];
            return;
        }
        if (T_DT == DT_INT8 || T_DT == DT_UINT8 || T_DT == DT_BOOL) {
            t_u8[to] = s_u8[gid];
            return;
        }
#endif
        t_i32[to] = s_i32[gid];
    } else if (S_DT == DT_FLOAT16 || S_DT == DT_BFLOAT16) {
        store_T(to, load_S(gid));
    } else {
        store_T(to, loadi_S(gid));
    }
}
