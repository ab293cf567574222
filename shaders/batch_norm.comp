#version 450
// Inference batch norm on a contiguous [N, C, inner...] tensor:
//   y = (x - mean[c]) * rsqrt(var[c] + eps) [* w[c]] [+ b[c]]
// Bindings: 0 = in, 1 = out, 2 = running_mean, 3 = running_var, 4 = weight, 5 = bias
// (weight/bias are placeholders unless HAS_W / HAS_B).
// Defines: elem_defines for X (the stream read); HAS_W, HAS_B. The output and the per-channel
// tables are of any dtype (ANY_OUT / ANY_IN, specialization constants 0..4 in binding order).
// One invocation per element; a tensor larger than one binding is split into
// element ranges (in/out bound as sub-ranges starting at `first`).
layout(local_size_x = 64) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufIn { X_T x[]; };
ANY_OUT(1, Y, y_out, 0)
ANY_IN(2, M, rmean, 1)
ANY_IN(3, V, rvar, 2)
ANY_IN(4, W, w_in, 3)
ANY_IN(5, B, b_in, 4)

layout(push_constant) uniform Push {
    uint n;      // elements in this dispatch
    uint c;      // channels
    uint inner;  // elements per (n, c) plane
    float eps;
    uint first;  // index of this dispatch's first element in the whole tensor
} p;

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.n) {
        return;
    }
    uint ch = ((p.first + gid) / p.inner) % p.c;
    float v = (LOAD_X(gid) - load_M(ch)) * inversesqrt(load_V(ch) + p.eps);
#ifdef HAS_W
    v *= load_W(ch);
#endif
#ifdef HAS_B
    v += load_B(ch);
#endif
    store_Y(gid, v);
}
