#version 450
// Running sum along one dim: out[.., k, ..] = sum of src[.., 0..k, ..].
// The tensor is viewed as [outer, len, inner]; one invocation per (outer, inner) line
// walks it in order. Bindings: 0 = src, 1 = out, contiguous, each of any dtype (ANY_IN / ANY_OUT
// in dtype.glslh; specialization constants S_DT, O_DT = 0, 1).
// Defines: INT_PATH: an integer output (sums in int32, wrapping like the int32 on the device),
// else sums in fp32.
// Groups fold into y.
layout(local_size_x = 64) in;
#include "dtype.glslh"

ANY_IN(0, S, s, 0)
ANY_OUT(1, O, o, 1)

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
        acc += loadi_S(i);
#else
        acc += load_S(i);
#endif
        store_O(i, acc);
    }
}
