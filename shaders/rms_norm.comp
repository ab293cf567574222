#version 450
// RMS norm over the last N elements: y = x * rsqrt(mean(x^2) + eps) [* w].
// Bindings: 0 = in, 1 = out, 2 = weight[N] (placeholder unless HAS_W).
// Defines: elem_defines for X, Y, W; HAS_W.
// One contiguous row per invocation.
layout(local_size_x = 64) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufIn { X_T x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufOut { Y_T y[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufW { W_T w[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint n;
    float eps;
} p;

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.rows) {
        return;
    }
    uint base = gid * p.n;
    float q = 0.0;
    for (uint k = 0u; k < p.n; ++k) {
        float v = LOAD_X(base + k);
        q += v * v;
    }
    float r = inversesqrt(q / float(p.n) + p.eps);
    for (uint k = 0u; k < p.n; ++k) {
#ifdef HAS_W
        STORE_Y(base + k, LOAD_X(base + k) * r * LOAD_W(k));
#else
        STORE_Y(base + k, LOAD_X(base + k) * r);
#endif
    }
}
