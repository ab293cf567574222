#version 450
// Layer norm over the last N elements (one contiguous row per invocation).
// Bindings: 0 = in, 1 = out, 2 = weight[N], 3 = bias[N], 4 = mean[rows], 5 = rstd[rows].
// Absent weight/bias are bound to a placeholder and never touched.
// Defines: elem_defines for X, Y, W, B, M (mean), R (rstd); HAS_W, HAS_B.
// Two passes for the statistics (mean, then the centred sum of squares), biased variance.
layout(local_size_x = 64) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufIn { X_T x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufOut { Y_T y[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufW { W_T w[]; };
layout(std430, set = 0, binding = 3) readonly buffer BufB { B_T b[]; };
layout(std430, set = 0, binding = 4) writeonly buffer BufMean { M_T mean_out[]; };
layout(std430, set = 0, binding = 5) writeonly buffer BufRstd { R_T rstd_out[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint n;
    float eps;
    uint stat_off;  // index of this dispatch's first row in the bound mean/rstd ranges
} p;

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.rows) {
        return;
    }
    uint base = gid * p.n;
    float s = 0.0;
    for (uint k = 0u; k < p.n; ++k) {
        s += LOAD_X(base + k);
    }
    float mean = s / float(p.n);
    float q = 0.0;
    for (uint k = 0u; k < p.n; ++k) {
        float c = LOAD_X(base + k) - mean;
        q += c * c;
    }
    float rstd = inversesqrt(q / float(p.n) + p.eps);
    for (uint k = 0u; k < p.n; ++k) {
        float v = (LOAD_X(base + k) - mean) * rstd;
#ifdef HAS_W
        v *= LOAD_W(k);
#endif
#ifdef HAS_B
        v += LOAD_B(k);
#endif
        STORE_Y(base + k, v);
    }
    STORE_M(p.stat_off + gid, mean);
    STORE_R(p.stat_off + gid, rstd);
}
