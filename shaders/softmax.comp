#version 450
// Softmax / log-softmax along one dim of a contiguous tensor viewed as [outer, D, inner].
// Bindings: 0 = in, 1 = out. Defines: elem_defines for X and Y; LOG for log-softmax.
// One invocation per (outer, inner) row; three passes over the row:
// max, sum of exp(x - max), then the write (max-subtracted, numerically stable).
// A NaN in the row makes the whole row NaN, as in torch.
layout(local_size_x = 64) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufIn { X_T x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufOut { Y_T y[]; };

layout(push_constant) uniform Push {
    uint rows;   // outer * inner
    uint d;      // length of the softmax dim
    uint inner;  // product of the dims after it (stride of the softmax dim)
} p;

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.rows) {
        return;
    }
    uint o = gid / p.inner;
    uint j = gid - o * p.inner;
    uint base = o * p.d * p.inner + j;
    uint st = p.inner;

    float m = LOAD_X(base);
    for (uint k = 1u; k < p.d; ++k) {
        float v = LOAD_X(base + k * st);
        m = (v > m || isnan(v)) && !isnan(m) ? v : m;  // GLSL's max leaves NaN undefined
    }
    float s = 0.0;
    for (uint k = 0u; k < p.d; ++k) {
        s += exp(LOAD_X(base + k * st) - m);
    }
#ifdef LOG
    float shift = m + log(s);
    for (uint k = 0u; k < p.d; ++k) {
        STORE_Y(base + k * st, LOAD_X(base + k * st) - shift);
    }
#else
    float inv = 1.0 / s;
    for (uint k = 0u; k < p.d; ++k) {
        STORE_Y(base + k * st, exp(LOAD_X(base + k * st) - m) * inv);
    }
#endif
}
