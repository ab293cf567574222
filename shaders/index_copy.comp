#version 450
// In-place cache update: t[o, index[j], k] = s[o, j, k] over the dims of t collapsed to
// [outer, size, inner] around the written dim (vkx.index_copy.default).
// Bindings: 0 = t (the state, read and written), 1 = index (int32 [n]), 2 = s [outer, n, inner].
// Defines: elem_defines for T and I (T and s share a dtype: a bit copy).
// The positions are data: the command buffer is recorded once and each call writes where
// that call's index says. A position outside [0, size) writes nothing (torch raises).
// One invocation per source element.
layout(local_size_x = 64) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) buffer BufT { T_T t[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufIdx { I_T idx[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufS { T_T s[]; };

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
    int position = LOADI_I(j);
    if (position < 0 || position >= p.size) {
        return;
    }
    t[(o * uint(p.size) + uint(position)) * p.inner + k] = s[gid];
}
