#version 450
// Running sum along one dim: out[.., k, ..] = sum of src[.., 0..k, ..].
// The tensor is viewed as [outer, len, inner]; one invocation per (outer, inner) line
// walks it in order. Bindings: 0 = src, 1 = out, contiguous.
// Defines: elem_defines for S and O; INT_PATH: an integer output (sums in int32, wrapping
// like the int32 on the device), else sums in fp32.
// Groups fold into y.
layout(local_size_x = 64) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufS { S_T s[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufO { O_T o[]; };

layout(push_constant) uniform Push {
    uint lines;  // outer * inner
    uint len;
    uint inner;
} p;

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.lines) {
        return;
    }
    uint outer = gid / p.inner;
    uint i = outer * p.len * p.inner + (gid - outer * p.inner);
#ifdef INT_PATH
    int acc = 0;
#else
    float acc = 0.0;
#endif
    for (uint k = 0u; k < p.len; ++k, i += p.inner) {
#ifdef INT_PATH
        acc += LOADI_S(i);
#else
        acc += LOAD_S(i);
#endif
        STORE_O(i, acc);
    }
}
