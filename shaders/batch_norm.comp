#version 450
// Inference batch norm on a contiguous [N, C, inner...] tensor:
//   y = (x - mean[c]) * rsqrt(var[c] + eps) [* w[c]] [+ b[c]]
// Bindings: 0 = in, 1 = out, 2 = running_mean, 3 = running_var, 4 = weight, 5 = bias
// (weight/bias are placeholders unless HAS_W / HAS_B).
// Defines: elem_defines for X, Y, M, V, W, B; HAS_W, HAS_B.
// One invocation per element; a tensor larger than one binding is split into
// element ranges (in/out bound as sub-ranges starting at `first`).
layout(local_size_x = 64) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufIn { X_T x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufOut { Y_T y[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufMean { M_T rmean[]; };
layout(std430, set = 0, binding = 3) readonly buffer BufVar { V_T rvar[]; };
layout(std430, set = 0, binding = 4) readonly buffer BufW { W_T w[]; };
layout(std430, set = 0, binding = 5) readonly buffer BufB { B_T b[]; };

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
    float v = (LOAD_X(gid) - LOAD_M(ch)) * inversesqrt(LOAD_V(ch) + p.eps);
#ifdef HAS_W
    v *= LOAD_W(ch);
#endif
#ifdef HAS_B
    v += LOAD_B(ch);
#endif
    STORE_Y(gid, v);
}
