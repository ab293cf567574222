#version 450
// Softmax / log-softmax along one dim of a contiguous tensor viewed as [outer, D, inner].
// Bindings: 0 = in, 1 = out. Define LOG for log-softmax.
// One invocation per (outer, inner) row; three passes over the row:
// max, sum of exp(x - max), then the write (max-subtracted, numerically stable).
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer BufIn { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufOut { float y[]; };

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

    float m = x[base];
    for (uint k = 1u; k < p.d; ++k) {
        m = max(m, x[base + k * st]);
    }
    float s = 0.0;
    for (uint k = 0u; k < p.d; ++k) {
        s += exp(x[base + k * st] - m);
    }
#ifdef LOG
    float shift = m + log(s);
    for (uint k = 0u; k < p.d; ++k) {
        y[base + k * st] = x[base + k * st] - shift;
    }
#else
    float inv = 1.0 / s;
    for (uint k = 0u; k < p.d; ++k) {
        y[base + k * st] = exp(x[base + k * st] - m) * inv;
    }
#endif
}
